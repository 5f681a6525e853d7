"""Faults during a copy, with real processes: a reader or writer helper stopped with SIGSTOP on
a real sshd host, an unreadable source file, an unwritable destination. Nothing hangs: the
mirror fails within its no-progress timeout, names the side that stalled, removes the partial
folder, stops the stuck helper, and still reports the bytes it saw."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import sys
import tempfile
from pathlib import Path

import pytest

from fleetdeck.backend.actions.audit import read_audit
from fleetdeck.backend.actions.mirror.main import mirror
from fleetdeck.backend.actions.mirror.verify import verify
from fleetdeck.backend.fleet.config import load_fleet
from fleetdeck.backend.fleet.link.ssh import HostLink
from fleetdeck.backend.host.lib import procfs

from support.sshfleet import _descendants

IDLE = 3  # command_timeout of the test fleet: the no-progress limit


def partials(parent: Path) -> list[str]:
    return [n for n in os.listdir(parent) if "fleetdeck-partial" in n] if parent.exists() else []


def helpers_under(root_pid: int) -> list[tuple[int, int]]:
    """(pid, start ticks) of fleetdeck helpers (by their marker) below an sshd."""
    out = []
    for pid in _descendants(root_pid):
        start = procfs.start_ticks(pid)
        if start is not None and procfs.has_helper_marker(pid):
            out.append((pid, start))
    return out


@pytest.fixture
def pair(spare_fleet, tmp_path):
    """Two sshd hosts of their own, command_timeout 3 s; a 48 MiB source; links."""
    a, b = spare_fleet.add("st-src"), spare_fleet.add("st-dst")
    fleet = load_fleet(
        str(spare_fleet.write_fleet(tmp_path / "hosts.toml", defaults={"command_timeout": IDLE}))
    )
    src = a.root / "run-1" / "adapter"
    src.mkdir(parents=True)
    (src / "adapter_config.json").write_bytes(b'{"r": 32}\n')
    (src / "adapter_model.safetensors").write_bytes(os.urandom(48 << 20))
    dst = b.root / "copy" / "adapter"
    return spare_fleet, fleet, src, dst


async def _stop_one_side(pair, side: str):
    spare, fleet, src, dst = pair
    host = "st-src" if side == "source" else "st-dst"
    stopped: list[tuple[int, int]] = []

    def progress(done, total):
        if not stopped and done >= 1 << 20:
            found = helpers_under(spare.hosts[host].proc.pid)
            assert len(found) == 1, found  # the reader (or the writer): the only helper there now
            os.kill(found[0][0], signal.SIGSTOP)
            stopped.append(found[0])

    sl, dl = HostLink(fleet.host("st-src")), HostLink(fleet.host("st-dst"))
    try:
        rep = await mirror(sl, str(src), dl, str(dst), progress=progress)
        assert stopped
        pid, start = stopped[0]
        assert rep.result == "failed" and rep.reason == "timeout" and not rep.ok, rep
        assert rep.error.startswith(f"{host}: the {side} stalled"), rep.error
        assert "the partial folder was removed" in rep.error
        assert 1 << 20 <= rep.bytes_copied < rep.bytes_src  # the bytes it did see
        assert rep.bytes_src == (48 << 20) + 10
        assert not dst.exists() and partials(dst.parent) == []
        assert not procfs.same_process(pid, start)  # the stopped helper was ended, not left
        log = [r for r in read_audit() if r["action"] == "mirror"]
        assert [r["result"] for r in log] == ["started", "failed"]
        assert log[-1]["reason"] == "timeout" and log[-1]["bytes"] == rep.bytes_copied
        # the hosts are fine afterwards: the next mirror goes through and verifies
        again = await mirror(sl, str(src), dl, str(dst))
        assert again.verified, again.error
        assert (await verify(sl, str(src), dl, str(dst))).verified
    finally:
        for pid, start in stopped:
            if procfs.same_process(pid, start):
                os.kill(pid, signal.SIGKILL)
        await sl.close()
        await dl.close()


@pytest.mark.sshd
async def test_a_stopped_reader_fails_the_copy_naming_the_source(pair):
    await _stop_one_side(pair, "source")


@pytest.mark.sshd
async def test_a_stopped_writer_fails_the_copy_naming_the_destination(pair):
    await _stop_one_side(pair, "destination")


@pytest.mark.sshd
async def test_a_copy_that_crawls_is_stopped_whole_at_its_copy_deadline(pair, monkeypatch):
    """Besides the no-progress limit, the copy as a whole has a deadline: 2 x command_timeout plus
    time for its bytes and files at the slowest rate allowed. A copy that never waits long enough
    to trip the no-progress limit but crawls (here every 1 MiB frame takes 0.4 s to relay, about
    19 s in all, against a deadline of 10 s: 6 s for the helpers and 4 s for the bytes) is stopped
    there, whole: no final name, no partial folder, audited as a timeout with the bytes it saw."""
    import importlib
    import time

    verify_mod = importlib.import_module("fleetdeck.backend.actions.mirror.verify")
    relay_mod = importlib.import_module("fleetdeck.backend.actions.mirror.relay")
    monkeypatch.setattr(relay_mod, "MIN_RATE", (48 << 20) / 4)  # 4 s for the 48 MiB
    monkeypatch.setattr(relay_mod, "HASH_RATE", 1e15)
    monkeypatch.setattr(verify_mod, "HASH_RATE", 1e15)
    monkeypatch.setattr(relay_mod, "PER_FILE", 0.0)
    spare, fleet, src, dst = pair
    frames: list[int] = []

    def crawl(done, total):
        if done:
            frames.append(done)
            time.sleep(0.4)

    sl, dl = HostLink(fleet.host("st-src")), HostLink(fleet.host("st-dst"))
    try:
        rep = await mirror(sl, str(src), dl, str(dst), progress=crawl)
        assert rep.result == "failed" and rep.reason == "timeout" and not rep.ok, rep
        assert "took longer than its limit of 10s" in rep.error, rep.error
        assert "the partial folder was removed" in rep.error
        assert len(frames) >= 2, "it was moving, not stalled"
        assert 0 < rep.bytes_copied < rep.bytes_src
        assert not dst.exists() and partials(dst.parent) == []
        log = [r for r in read_audit() if r["action"] == "mirror"]
        assert [r["result"] for r in log] == ["started", "failed"]
        assert log[-1]["reason"] == "timeout" and log[-1]["bytes"] == rep.bytes_copied
    finally:
        await sl.close()
        await dl.close()


# -- permissions: helpers that run as an unprivileged user on a local host ------------------
SYS_PY = "/usr/bin/python3"


@pytest.fixture
def nobody_python(tmp_path):
    """A `python` for the fleet file that runs the helper as user nobody (real setpriv)."""
    if os.geteuid() != 0 or not shutil.which("setpriv") or not os.access(SYS_PY, os.X_OK):
        pytest.skip("needs root, setpriv and /usr/bin/python3")
    base = Path(tempfile.mkdtemp(prefix="fd-mirror-perm-"))
    os.chmod(base, 0o755)  # nobody may walk in; only root may write
    wrapper = base / "py-as-nobody"
    wrapper.write_text(
        f'#!/bin/sh\nexec setpriv --reuid=65534 --regid=65534 --clear-groups {SYS_PY} "$@"\n'
    )
    wrapper.chmod(0o755)
    yield base, str(wrapper)
    shutil.rmtree(base, ignore_errors=True)


def _fleet(tmp_path, wrapper: str, as_nobody: str):
    hosts = tmp_path / "hosts.toml"
    lines = ["[hosts.a]", "local = true"]
    lines += [f'python = "{wrapper}"'] if as_nobody == "a" else [f'python = "{sys.executable}"']
    lines += ["[hosts.b]", "local = true"]
    lines += [f'python = "{wrapper}"'] if as_nobody == "b" else [f'python = "{sys.executable}"']
    hosts.write_text("\n".join(lines) + "\n")
    return load_fleet(str(hosts))


async def test_unreadable_source_file_is_src_unreadable_with_the_bytes_seen(
    tmp_path, nobody_python
):
    base, wrapper = nobody_python
    src = base / "src" / "adapter"
    src.mkdir(parents=True, mode=0o755)
    os.chmod(src.parent, 0o755)
    os.chmod(src, 0o755)
    (src / "a-readable.bin").write_bytes(os.urandom(3 << 20))
    (src / "a-readable.bin").chmod(0o644)
    secret = src / "b-secret.bin"
    secret.write_bytes(b"root only\n")
    secret.chmod(0o600)
    dst = tmp_path / "dst" / "adapter"
    fleet = _fleet(tmp_path, wrapper, as_nobody="a")
    a, b = HostLink(fleet.host("a")), HostLink(fleet.host("b"))
    rep = await mirror(a, str(src), b, str(dst))
    assert rep.result == "failed" and rep.reason == "src-unreadable", rep
    assert rep.error.startswith("a: cannot read b-secret.bin: Permission denied"), rep.error
    assert rep.bytes_copied == 3 << 20 and rep.bytes_src == (3 << 20) + 10
    assert not dst.exists() and partials(dst.parent) == []


async def test_unwritable_destination_is_dst_unwritable(tmp_path, nobody_python):
    base, wrapper = nobody_python
    src = tmp_path / "src" / "adapter"
    src.mkdir(parents=True)
    (src / "w.bin").write_bytes(b"w" * 1000)
    fleet = _fleet(tmp_path, wrapper, as_nobody="b")
    a, b = HostLink(fleet.host("a")), HostLink(fleet.host("b"))
    root_only = base / "root-only"
    root_only.mkdir()
    root_only.chmod(0o755)
    for dst in (root_only / "adapter", root_only / "new parent" / "adapter"):
        rep = await mirror(a, str(src), b, str(dst))
        assert rep.result == "refused" and rep.reason == "dst-unwritable", rep
        assert "b:" in rep.error and "ermission denied" in rep.error
        assert os.listdir(root_only) == []
    assert stat.S_IMODE(root_only.stat().st_mode) == 0o755


@pytest.mark.sshd
async def test_a_login_shell_that_starts_printing_mid_mirror_is_named(spare_fleet, tmp_path):
    """The source lists fine, then its login shell prints a banner before the reader's first
    line: a failed report naming it (`shell-output`), not an exception."""
    count = tmp_path / "logins"
    rc = tmp_path / "noisy-after-first"
    rc.write_text(
        f'#!/bin/sh\nif [ -e "{count}" ]; then echo "Welcome back"; fi\ntouch "{count}"\n'
        'exec /bin/sh -c "$SSH_ORIGINAL_COMMAND"\n'
    )
    rc.chmod(0o755)
    a = spare_fleet.add("noisy-src", sshd_extra=(f"ForceCommand {rc}",))
    spare_fleet.add("quiet-dst")
    fleet = load_fleet(str(spare_fleet.write_fleet(tmp_path / "hosts.toml")))
    src = a.root / "adapter"
    src.mkdir()
    (src / "w.bin").write_bytes(b"w" * 5000)
    dst = spare_fleet.hosts["quiet-dst"].root / "copy" / "adapter"
    sl, dl = HostLink(fleet.host("noisy-src")), HostLink(fleet.host("quiet-dst"))
    try:
        await sl.connection()  # the shared connection's first login is quiet...
        rep = await mirror(sl, str(src), dl, str(dst))  # ...the next ones print
    finally:
        await sl.close()
        await dl.close()
    assert rep.result == "failed" and rep.reason == "shell-output", rep
    assert "Welcome back" in rep.error and rep.error.startswith("noisy-src: ")
    assert not dst.exists() and partials(dst.parent) == []
