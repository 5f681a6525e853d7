"""The mirror helper on the host library: one answer shape, identity by pid + start time, the
helper marker (never an argv substring) telling fleetdeck's own writers apart."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid

import pytest

from fleetdeck.backend.actions.mirror.common import HELPER
from fleetdeck.backend.actions.mirror.main import mirror
from fleetdeck.backend.fleet.link.bundle import modules_for
from fleetdeck.backend.host.lib import procfs

pytestmark = pytest.mark.sshd


@pytest.fixture
def sleepers():
    """Real processes standing in for writers: one marked as a fleetdeck helper by its
    environment (its argv says nothing), one whose argv merely mentions the marker string."""
    env = {**os.environ, procfs.HELPER_ENV: "1"}
    env_clean = {k: v for k, v in os.environ.items() if k != procfs.HELPER_ENV}
    marked = subprocess.Popen(["sleep", "300"], env=env)
    mimic = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(300)", "<fleetdeck-helper>"], env=env_clean
    )
    yield marked, mimic
    for p in (marked, mimic):
        p.kill()
        p.wait()


def test_helper_is_a_bundle_of_the_host_library():
    names = [m[0] for m in modules_for(HELPER)]
    assert names[-1] == HELPER
    assert {
        "fleetdeck.backend.host.lib.serve",
        "fleetdeck.backend.host.lib.procfs",
        "fleetdeck.backend.host.lib.hashing",
        "fleetdeck.backend.host.lib.text",
    } <= set(names)


async def test_list_answers_in_the_one_shape(links, sshd_fleet):
    h2 = links["h2"]
    ok = await h2.run_helper(HELPER, {"op": "list", "path": str(sshd_fleet.hosts["h2"].root)})
    assert ok["ok"] is True and ok["kind"] == "dir"
    bad = await h2.run_helper(HELPER, {"op": "nope"})
    assert bad["ok"] is False and bad["error"]["code"] == "bad-request" and bad["error"]["message"]


async def test_stale_partials_judged_by_identity_and_marker(links, sshd_fleet, sleepers):
    """A partial whose writer is alive (same pid AND start time, marked) is kept; one whose pid
    was reused (other start time), or whose process only mentions the marker in argv, goes."""
    marked, mimic = sleepers
    tag = uuid.uuid4().hex[:8]
    src = sshd_fleet.hosts["h1"].root / f"ident-{tag}" / "adapter"
    src.mkdir(parents=True)
    (src / "adapter_model.safetensors").write_bytes(b"w" * 1000)
    dst = sshd_fleet.hosts["h2"].root / f"ident-{tag}" / "adapter"
    dst.parent.mkdir(parents=True)
    m_start, x_start = procfs.start_ticks(marked.pid), procfs.start_ticks(mimic.pid)
    assert m_start is not None and x_start is not None
    pre = f".{dst.name}.fleetdeck-partial-"
    live = dst.parent / f"{pre}{marked.pid}-{m_start}-0000aaaa"
    reused = dst.parent / f"{pre}{marked.pid}-{m_start + 1}-0000bbbb"
    mimicked = dst.parent / f"{pre}{mimic.pid}-{x_start}-0000cccc"
    legacy_mimic = dst.parent / f"{pre}{mimic.pid}-0000dddd"
    for p in (live, reused, mimicked, legacy_mimic):
        (p / "junk").mkdir(parents=True)
    try:
        rep = await mirror(links["h1"], str(src), links["h2"], str(dst))
        assert rep.verified, rep.error
        left = sorted(n for n in os.listdir(dst.parent) if "fleetdeck-partial" in n)
        assert left == [live.name]
    finally:
        shutil.rmtree(src.parent, ignore_errors=True)
        shutil.rmtree(dst.parent, ignore_errors=True)


async def test_overlap_is_judged_on_resolved_paths(links, sshd_fleet):
    """`..` or a symlinked parent cannot disguise a destination inside the source."""
    tag = uuid.uuid4().hex[:8]
    top = sshd_fleet.hosts["h1"].root / f"ovl-{tag}"
    src = top / "adapter"
    src.mkdir(parents=True)
    (src / "w").write_bytes(b"w")
    (top / "alias").symlink_to(src)
    try:
        for dst in (f"{top}/../{top.name}/adapter/inside", f"{top}/alias/inside"):
            rep = await mirror(links["h1"], str(src), links["h1"], dst)
            assert rep.result == "refused" and rep.reason == "overlap", (dst, rep)
        assert sorted(os.listdir(src)) == ["w"]
    finally:
        shutil.rmtree(top, ignore_errors=True)


async def test_a_source_file_named_like_a_partial_is_copied(links, sshd_fleet):
    """Only folders a writer made (by their exact name pattern) are skipped as partials."""
    tag = uuid.uuid4().hex[:8]
    src = sshd_fleet.hosts["h1"].root / f"pn-{tag}" / "adapter"
    src.mkdir(parents=True)
    (src / ".fleetdeck-partial-notes").write_bytes(b"mine\n")
    (src / ".fleetdeck-partial-1-0000abcd").mkdir()  # a folder, but in SRC: copied as well
    dst = sshd_fleet.hosts["h2"].root / f"pn-{tag}" / "adapter"
    try:
        rep = await mirror(links["h1"], str(src), links["h2"], str(dst))
        assert rep.verified, rep.error
        assert (dst / ".fleetdeck-partial-notes").read_bytes() == b"mine\n"
        assert (dst / ".fleetdeck-partial-1-0000abcd").is_dir()
        again = await mirror(links["h1"], str(src), links["h2"], str(dst))
        assert again.result == "identical", again
    finally:
        shutil.rmtree(src.parent, ignore_errors=True)
        shutil.rmtree(dst.parent, ignore_errors=True)


async def test_helpers_end_themselves_when_the_controller_goes_quiet(links, sshd_fleet):
    """A controller that stops without closing anything (stopped, or a hung connection): the
    writer removes its partial folder and exits, the reader exits, each after its own
    no-progress limit (`idle`, `wait`: 1 s here)."""
    tag = uuid.uuid4().hex[:8]
    dst = sshd_fleet.hosts["h2"].root / f"quiet-{tag}" / "adapter"
    src = sshd_fleet.hosts["h1"].root / f"quiet-{tag}"
    src.mkdir()
    (src / "f").write_bytes(b"0123456789")
    st = (src / "f").stat()
    files = [
        {
            "path": "f",
            "bytes": 10,
            "mtime_ns": st.st_mtime_ns,
            "ctime_ns": st.st_ctime_ns,
            "ino": st.st_ino,
            "mode": 0o644,
        }
    ]
    writer = await links["h2"].transfer_helper(HELPER)
    reader = await links["h1"].transfer_helper(HELPER)
    try:
        await writer.send_json(
            {"op": "write", "path": str(dst), "files": files, "dirs": [], "idle": 1, "wait": 1}
        )
        ready = await writer.recv_json()
        assert ready["ok"] and os.path.isdir(ready["partial"])
        writer.stdin.write(b"\0\0\0\x05hello")  # half a file, then nothing more
        await writer.stdin.drain()
        await writer.wait(60)  # it ends by itself (the test's own bound, not a measurement)
        assert not os.path.exists(ready["partial"]) and not dst.exists()
        assert "nothing moved" in await writer.read_stderr()

        await reader.send_json(
            {"op": "read", "path": str(src), "files": files, "dirs": [], "idle": 1, "wait": 1}
        )
        hello = await reader.recv_json()
        assert hello["ok"] and procfs.same_process(hello["pid"], hello["start"])
        await reader.wait(60)  # streamed its file, then no recheck request ever came
        assert not procfs.same_process(hello["pid"], hello["start"])
    finally:
        writer.close()
        reader.close()
        shutil.rmtree(src, ignore_errors=True)
        shutil.rmtree(dst.parent, ignore_errors=True)
