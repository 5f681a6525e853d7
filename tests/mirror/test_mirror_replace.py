"""mirror --replace and dst-is-src, over real loopback sshd hosts and real local hosts.

h1 and h2 of the test fleet are two fleet entries for one machine, which is exactly the case
that made a folder "identical to itself": the same path through both, a bind mount, a link in
a parent. Faults in the middle of a replace are real: a writer stopped with SIGSTOP, a tmpfs
that fills up, and the swap's own renames failed or killed by strace's syscall fault injection.
"""

from __future__ import annotations

import json
import os
import pty
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from fleetdeck.backend.actions.audit import read_audit
from fleetdeck.backend.actions.mirror.main import mirror, replaced_name
from fleetdeck.backend.actions.mirror.verify import verify
from fleetdeck.backend.fleet.config import load_fleet
from fleetdeck.backend.fleet.link.ssh import HostLink
from fleetdeck.backend.host.lib import procfs
from fleetdeck.cli.main import main

from support.sshfleet import _descendants
from support.trees import make_tree, read_tree

pytestmark = pytest.mark.sshd

HOSTILE_DST = "-rf $(touch pwned) 'q' \"d\"\nnl"


def partials(parent: Path) -> list[str]:
    return [n for n in os.listdir(parent) if "fleetdeck-partial" in n] if parent.exists() else []


def kept(parent: Path, name: str) -> list[Path]:
    """Folders beside `name` that a replace kept."""
    return sorted(p for p in parent.iterdir() if p.name.startswith(name + ".replaced-"))


def mirror_log() -> list[dict]:
    return [r for r in read_audit() if r["action"] == "mirror"]


@pytest.fixture
def fleet(fleet_file):
    return load_fleet(str(fleet_file))


@pytest.fixture
async def links(fleet):
    made = {n: HostLink(fleet.host(n)) for n in ("h1", "h2")}
    yield made
    for link in made.values():
        await link.close()


@pytest.fixture
def dirs(sshd_fleet):
    """A filled source on h1 and, on h2, a destination that holds an older, different copy."""
    tag = uuid.uuid4().hex[:8]
    src = sshd_fleet.hosts["h1"].root / f"r-{tag}" / "run 1 $(x)" / "adapter"
    src.mkdir(parents=True)
    files = make_tree(src)
    dst = sshd_fleet.hosts["h2"].root / f"r-{tag}" / HOSTILE_DST / "adapter"
    dst.mkdir(parents=True)
    old = {
        "adapter_model.safetensors": os.urandom(1000),
        "adapter_config.json": b'{"r": 8}\n',
        "old only/notes.txt": b"from the run before\n",
    }
    for rel, data in old.items():
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        (dst / rel).write_bytes(data)
    yield src, dst, files, old
    shutil.rmtree(src.parent.parent, ignore_errors=True)
    shutil.rmtree(dst.parent.parent, ignore_errors=True)


# -- dst-is-src --------------------------------------------------------------------------------
def _mount_bind(src: Path, at: Path) -> bool:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    at.mkdir(parents=True, exist_ok=True)
    return (
        subprocess.run(["mount", "--bind", str(src), str(at)], capture_output=True).returncode == 0
    )


async def test_the_source_itself_reached_another_way_is_refused(links, dirs, sshd_fleet):
    """The same folder through a second fleet entry for the same machine, through a symlink
    in a parent, and through a bind mount: never "identical", refused `dst-is-src`, with or
    without --replace, and nothing changes; verify refuses it too."""
    src, _dst, files, _old = dirs
    h2root = sshd_fleet.hosts["h2"].root
    tag = uuid.uuid4().hex[:8]
    link = h2root / f"link-{tag}"
    link.symlink_to(src.parent)
    ways = [str(src), str(link / "adapter")]
    bound = h2root / f"bind-{tag}" / "adapter"
    mounted = _mount_bind(src, bound)
    if mounted:
        ways.append(str(bound))
    try:
        for way in ways:
            for replace in (False, True):
                rep = await mirror(links["h1"], str(src), links["h2"], way, replace=replace)
                assert rep.result == "refused" and rep.reason == "dst-is-src", (
                    way,
                    rep.reason,
                    rep.error,
                )
                assert not rep.verified and not rep.ok and "itself on disk" in rep.error
            ver = await verify(links["h1"], str(src), links["h2"], way)
            assert ver.reason == "dst-is-src" and not ver.ok
            assert read_tree(src) == files
            assert kept(src.parent, "adapter") == [] and partials(src.parent) == []
        # a destination inside the source, reached through the link, is one folder too
        rep = await mirror(links["h1"], str(src), links["h2"], str(link / "adapter" / "inner"))
        assert rep.result == "refused" and rep.reason == "overlap", rep
        assert not (src / "inner").exists()
        assert [r["result"] for r in mirror_log()] == ["refused"] * (2 * len(ways) + 1)
        if not mounted:
            pytest.skip("bind mounts need root; the other ways were checked")
    finally:
        if mounted:
            subprocess.run(["umount", str(bound)], check=False)
        link.unlink()


# -- replace -----------------------------------------------------------------------------------
async def test_replace_puts_a_proven_copy_in_place_and_keeps_the_old_one(links, dirs):
    src, dst, files, old = dirs
    rep = await mirror(links["h1"], str(src), links["h2"], str(dst))
    assert rep.result == "refused" and rep.reason == "dst-differs" and "--replace" in rep.error
    dry = await mirror(links["h1"], str(src), links["h2"], str(dst), replace=True, dry_run=True)
    assert dry.ok and dry.result == "would-replace" and dry.plan.replace
    assert read_tree(dst) == old and kept(dst.parent, "adapter") == []

    rep = await mirror(
        links["h1"],
        str(src),
        links["h2"],
        str(dst),
        replace=True,
        confirmation={"via": "--confirm", "typed": str(dst)},
    )
    assert rep.result == "replaced" and rep.verified and rep.ok, rep.error
    assert read_tree(dst) == files and (dst / "empty-dir").is_dir()
    assert all(f.status == "copied" and f.sha256_src == f.sha256_dst for f in rep.files)
    (backup,) = kept(dst.parent, "adapter")
    assert rep.kept_as == str(backup) and read_tree(backup) == old
    assert partials(dst.parent) == []
    assert not Path("pwned").exists() and not (dst.parent / "pwned").exists()
    log = mirror_log()
    assert [r["result"] for r in log] == ["refused", "started", "done"]
    assert log[1]["replace"] is True and log[1]["kept_as"] == str(backup)
    assert log[2]["kept_as"] == str(backup) and log[2]["verified"] is True
    assert log[2]["confirmation"] == {"via": "--confirm", "typed": str(dst)}
    # replacing again over an identical copy changes nothing
    again = await mirror(links["h1"], str(src), links["h2"], str(dst), replace=True)
    assert again.result == "identical" and again.kept_as is None
    assert kept(dst.parent, "adapter") == [backup]


def test_replaced_name_stays_a_name():
    assert replaced_name("/a/b/adapter/", 0) == "/a/b/adapter.replaced-19700101T000000Z"
    long = "/x/" + "\udce9" * 300
    name = replaced_name(long, 0).rsplit("/", 1)[1]
    assert len(name.encode("utf-8", "surrogateescape")) == 255
    assert name.endswith(".replaced-19700101T000000Z")


def test_cli_replace_confirmation(fleet_file, dirs, capsys):
    src, dst, files, old = dirs
    s, d = f"h1:{src}", f"h2:{dst}"
    assert (
        main(
            ["mirror", "--hosts", str(fleet_file), s, d, "--replace", f"--confirm={dst}x", "--json"]
        )
        == 1
    )
    out = capsys.readouterr()
    doc = json.loads(out.out)
    assert doc["result"] == "refused" and doc["reason"] == "not-confirmed"
    assert "did not match" in out.err and out.err.count("\n") == 1
    assert read_tree(dst) == old and kept(dst.parent, "adapter") == []
    assert mirror_log()[-1]["result"] == "refused"
    assert mirror_log()[-1]["confirmation"]["typed"] == f"{dst}x"
    assert (
        main(
            ["mirror", "--hosts", str(fleet_file), s, d, "--replace", f"--confirm={dst}", "--json"]
        )
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    assert doc["result"] == "replaced" and doc["verified"] is True
    assert doc["kept_as"] and read_tree(Path(doc["kept_as"])) == old
    assert read_tree(dst) == files


# -- faults in the middle of a replace ---------------------------------------------------------
def _untouched(dst: Path, old: dict) -> None:
    assert read_tree(dst) == old
    assert kept(dst.parent, "adapter") == [] and partials(dst.parent) == []


async def test_a_writer_stopped_mid_replace_leaves_the_original(spare_fleet, tmp_path):
    a, b = spare_fleet.add("rp-src"), spare_fleet.add("rp-dst")
    fleet = load_fleet(
        str(spare_fleet.write_fleet(tmp_path / "hosts.toml", defaults={"command_timeout": 3}))
    )
    src = a.root / "run-1" / "adapter"
    src.mkdir(parents=True)
    (src / "adapter_model.safetensors").write_bytes(os.urandom(48 << 20))
    dst = b.root / "copy" / "adapter"
    dst.mkdir(parents=True)
    old = {"adapter_model.safetensors": b"old weights"}
    (dst / "adapter_model.safetensors").write_bytes(old["adapter_model.safetensors"])
    stopped: list[tuple[int, int]] = []

    def progress(done, total):
        if not stopped and done >= 1 << 20:
            for pid in _descendants(b.proc.pid):
                start = procfs.start_ticks(pid)
                if start is not None and procfs.has_helper_marker(pid):
                    os.kill(pid, signal.SIGSTOP)
                    stopped.append((pid, start))

    sl, dl = HostLink(fleet.host("rp-src")), HostLink(fleet.host("rp-dst"))
    try:
        rep = await mirror(sl, str(src), dl, str(dst), replace=True, progress=progress)
        assert stopped
        assert rep.result == "failed" and rep.reason == "timeout" and not rep.ok, rep
        assert "the destination being replaced is unchanged under its name" in rep.error, rep.error
        assert rep.kept_as is None
        _untouched(dst, old)
        assert [r["result"] for r in mirror_log()] == ["started", "failed"]
    finally:
        for pid, start in stopped:
            if procfs.same_process(pid, start):
                os.kill(pid, signal.SIGKILL)
        await sl.close()
        await dl.close()


@pytest.mark.root
async def test_a_disk_that_fills_mid_replace_leaves_the_original(links, dirs):
    src, dst, files, old = dirs
    parent = dst.parent
    moved = parent.parent / "moved-aside"
    parent.rename(moved)
    parent.mkdir()
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(parent)], capture_output=True
    )
    if os.geteuid() != 0 or r.returncode != 0:
        pytest.skip("needs root and tmpfs mounts")
    try:
        shutil.copytree(moved / "adapter", dst)
        (src / "adapter_model.safetensors").write_bytes(os.urandom(3 << 20))
        filled = []

        def progress(done, total):
            if not filled:
                filled.append(done)
                (parent / "filler").write_bytes(b"\0" * (2 << 20))

        rep = await mirror(
            links["h1"], str(src), links["h2"], str(dst), replace=True, progress=progress
        )
        assert filled
        assert rep.result == "failed" and rep.reason == "disk-full", rep.error
        # what DST's host said after the failure (a host too busy to answer in time is said so)
        assert "unchanged under its name" in rep.error or "under its name or kept as" in rep.error
        _untouched(dst, old)
        assert sorted(os.listdir(parent)) == ["adapter", "filler"]
    finally:
        subprocess.run(["umount", str(parent)], check=False)


@pytest.fixture
def faulty(tmp_path, dirs):
    """A fleet of two local hosts: `src`, and `dst` whose helpers run under strace with a
    fault injected into their renameat2 calls (the swap's renames; nothing else makes one)."""
    if shutil.which("strace") is None or not os.access("/usr/bin/python3", os.X_OK):
        pytest.skip("needs strace and /usr/bin/python3")
    base = Path(tempfile.mkdtemp(prefix="fd-replace-fault-"))

    def make(inject: str) -> Path:
        wrapper = base / f"py-{uuid.uuid4().hex[:6]}"
        wrapper.write_text(
            f"#!/bin/sh\nexec strace -f -qq -o /dev/null -e trace=renameat2 "
            f'-e inject=renameat2:{inject} /usr/bin/python3 "$@"\n'
        )
        wrapper.chmod(0o755)
        path = tmp_path / f"hosts-{wrapper.name}.toml"
        path.write_text(
            f'[hosts.src]\nlocal = true\n[hosts.dst]\nlocal = true\npython = "{wrapper}"\n'
        )
        return path

    yield make
    shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize(
    "inject,where",
    [
        ("error=EIO:when=2", "put back"),  # the copy cannot take the name: the original goes back
        ("error=EIO:when=2+", "kept"),  # ...and cannot go back either: it stays aside, named
        ("signal=SIGKILL:when=2", "killed"),  # the writer dies between the two renames
    ],
)
def test_a_fault_in_the_swap_never_loses_the_original(faulty, dirs, inject, where, capsys):
    src, dst, files, old = dirs
    hosts = faulty(inject)
    rc = main(
        [
            "mirror",
            "--hosts",
            str(hosts),
            f"src:{src}",
            f"dst:{dst}",
            "--replace",
            f"--confirm={dst}",
            "--json",
        ]
    )
    out = capsys.readouterr()
    doc = json.loads(out.out)
    assert rc == 1 and doc["result"] == "failed" and not doc["verified"], doc
    assert partials(dst.parent) == []  # the new copy never stays under a hidden name
    backups = kept(dst.parent, "adapter")
    if where == "put back":
        assert doc["reason"] == "swap-failed" and "put back under its name" in doc["error"]
        _untouched(dst, old)
        assert doc["kept_as"] is None
    else:
        # the original is whole under the name the error (and the audit) gives; DST is absent
        assert not dst.exists() and len(backups) == 1 and read_tree(backups[0]) == old
        assert doc["kept_as"] == str(backups[0])
        assert f"kept as {backups[0]}".replace("\n", "\\n") in doc["error"], doc["error"]
        assert mirror_log()[0]["kept_as"] == str(backups[0])
    assert [r["result"] for r in mirror_log()] == ["started", "failed"]
    assert "Traceback" not in out.err


def _prompted(hosts: Path, *argv: str, typed: bytes) -> tuple[int, str, str]:
    """The real CLI with its stdin and stderr on a pseudo-terminal, `typed` typed into it."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "fleetdeck.cli.main", "--hosts", str(hosts), *argv],
        stdin=slave,
        stdout=subprocess.PIPE,
        stderr=slave,
    )
    os.close(slave)
    os.write(master, typed)
    out, _ = proc.communicate(timeout=180)
    seen = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    return proc.returncode, out.decode(), seen.decode("utf-8", "replace")


def test_terminal_prompt_needs_the_destination_typed_exactly(fleet_file, dirs):
    src, dst0, files, old = dirs
    dst = dst0.parent.parent / "prompt $(x) 'q'" / "adapter"
    shutil.copytree(dst0, dst)
    argv = ("mirror", f"h1:{src}", f"h2:{dst}", "--replace")
    rc, out, err = _prompted(fleet_file, *argv, typed=b"yes\n")
    assert rc == 1 and "Type the destination path" in err and "did not match" in err
    assert read_tree(dst) == old and kept(dst.parent, "adapter") == []
    rc, out, err = _prompted(fleet_file, *argv, typed=str(dst).encode() + b"\n")
    assert rc == 0 and "replaced and verified" in out, (out, err)
    (backup,) = kept(dst.parent, "adapter")
    assert read_tree(dst) == files and read_tree(backup) == old
    assert [r["confirmation"]["via"] for r in mirror_log() if r["result"] != "started"] == [
        "prompt",
        "prompt",
    ]


@pytest.mark.root
async def test_a_destination_that_is_a_mount_point_is_not_replaced(links, dirs):
    """A mount point cannot be renamed aside: refused `dst-mounted` before anything is copied."""
    src, dst, files, old = dirs
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(dst)], capture_output=True
    )
    if os.geteuid() != 0 or r.returncode != 0:
        pytest.skip("needs root and tmpfs mounts")
    try:
        (dst / "on the mount").write_bytes(b"old")
        rep = await mirror(links["h1"], str(src), links["h2"], str(dst), replace=True)
        assert rep.result == "refused" and rep.reason == "dst-mounted", rep
        assert "mount point" in rep.error
        assert read_tree(dst) == {"on the mount": b"old"}
        assert kept(dst.parent, "adapter") == [] and partials(dst.parent) == []
        assert [r["result"] for r in mirror_log()] == ["started", "refused"]
    finally:
        subprocess.run(["umount", str(dst)], check=False)
