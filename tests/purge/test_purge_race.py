"""The check-to-delete step of purge under a racing renamer: another process exchanges the
checkpoint with the run's final adapter (renameat2 RENAME_EXCHANGE), renames it away and back,
and swaps its parent folder for a decoy, while `remove_pinned` deletes it. The final adapter's
bytes must never change; the checkpoint is either deleted or left in place, refused
`changed-since-check`."""

from __future__ import annotations

import ctypes
import hashlib
import multiprocessing
import os
import platform
from pathlib import Path

import pytest

from fleetdeck.backend.host.purge.paths import WalkError, open_chain
from fleetdeck.backend.host.purge.remove import PRIVATE_PREFIX, put_back, remove_pinned

from support.weights import safetensors

SYS_RENAMEAT2 = {"x86_64": 316, "aarch64": 276}.get(platform.machine())
AT_FDCWD = -100
RENAME_EXCHANGE = 2
ITERATIONS = 300

pytestmark = pytest.mark.skipif(
    SYS_RENAMEAT2 is None, reason="renameat2 syscall number unknown here"
)


def exchange(libc, a: bytes, b: bytes) -> bool:
    """renameat2(a, b, RENAME_EXCHANGE) as a raw syscall; True when it swapped them."""
    return libc.syscall(SYS_RENAMEAT2, AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) == 0


def racer(conn, run: str) -> None:
    """Between a "go" and a "pause", race pairs of moves that leave everything where it was
    once both halves are done: the second half is retried until it goes through."""
    libc = ctypes.CDLL(None, use_errno=True)
    ck = f"{run}/checkpoints/checkpoint-25".encode()
    adapter = f"{run}/adapter".encode()
    parent, decoy = f"{run}/checkpoints".encode(), f"{run}/decoy".encode()
    moved = f"{run}/moved".encode()

    def undo(fn) -> None:
        for _ in range(1_000_000):
            if fn():
                return
        conn.send("stuck")  # the entry never came back: purge kept or destroyed it

    def rename_back() -> bool:
        try:
            os.rename(moved, ck)
            return True
        except OSError:
            return False

    while conn.recv() == "go":
        n = 0
        while not conn.poll():
            kind = n % 3
            n += 1
            if kind == 0:
                if exchange(libc, ck, adapter):
                    undo(lambda: exchange(libc, ck, adapter))
            elif kind == 1:
                if exchange(libc, parent, decoy):
                    undo(lambda: exchange(libc, parent, decoy))
            else:
                try:
                    os.rename(ck, moved)
                except OSError:
                    continue
                undo(rename_back)
        assert conn.recv() == "pause"
        conn.send("paused")


def tree_sha(d: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir())}


def inodes(d: Path) -> set[tuple[int, int]]:
    out = set()
    for p in [d, *d.rglob("*")]:
        st = p.lstat()
        out.add((st.st_dev, st.st_ino))
    return out


def make_checkpoint(ck: Path) -> None:
    (ck / "sub").mkdir(parents=True)
    (ck / "adapter_model.safetensors").write_bytes(safetensors(os.urandom(512)))
    (ck / "optimizer.pt").write_bytes(os.urandom(1024))
    (ck / "sub" / "rng_state.pth").write_bytes(os.urandom(64))


def test_racing_renames_and_exchanges_never_touch_the_final_adapter(tmp_path):
    run = tmp_path / "runs" / "run-race"
    adapter = run / "adapter"
    adapter.mkdir(parents=True)
    (adapter / "adapter_model.safetensors").write_bytes(safetensors(os.urandom(4096)))
    (adapter / "adapter_config.json").write_text('{"r": 32}')
    (run / "decoy").mkdir()
    (run / "decoy" / "checkpoint-25").symlink_to(adapter)
    before = tree_sha(adapter)
    adapter_id = (adapter.stat().st_dev, adapter.stat().st_ino)
    keep = inodes(adapter)
    ck = run / "checkpoints" / "checkpoint-25"
    comps = [c for c in str(ck).split("/") if c]

    ctx = multiprocessing.get_context("fork")
    ours, theirs = ctx.Pipe()
    proc = ctx.Process(target=racer, args=(theirs, str(run)), daemon=True)
    proc.start()
    outcomes = {"deleted": 0, "refused": 0}
    try:
        for i in range(ITERATIONS):
            if not ck.exists():
                make_checkpoint(ck)
            parent, fd, pins = open_chain(comps)
            os.close(parent)
            os.close(fd)
            allowed = inodes(ck)
            ours.send("go")
            try:
                remove_pinned(comps, pins, allowed, keep)
                outcomes["deleted"] += 1
            except WalkError as e:
                assert e.code == "changed-since-check", e.detail
                outcomes["refused"] += 1
            ours.send("pause")
            assert ours.recv() == "paused", f"iteration {i}: the racer's entry never came back"
            # everything is back in place: the adapter is the same folder with the same bytes
            assert (adapter.stat().st_dev, adapter.stat().st_ino) == adapter_id, f"iteration {i}"
            assert tree_sha(adapter) == before, f"iteration {i}: the final adapter changed"
            assert not [n for n in os.listdir(ck.parent) if n.startswith(PRIVATE_PREFIX)]
            if ck.exists():  # refused before anything inside was touched: left whole
                assert inodes(ck) == allowed, f"iteration {i}"
    finally:
        ours.send("quit")
        proc.join(30)
        if proc.is_alive():
            proc.kill()
    # the race was really run: some removals met a swapped entry, and some went through
    assert outcomes["refused"] > 0 and outcomes["deleted"] > 0, outcomes
    assert sum(outcomes.values()) == ITERATIONS


def test_a_pin_mismatch_puts_the_entry_back_and_refuses(tmp_path):
    run = tmp_path / "run"
    ck, adapter = run / "checkpoints" / "checkpoint-25", run / "adapter"
    make_checkpoint(ck)
    adapter.mkdir()
    (adapter / "adapter_model.safetensors").write_bytes(safetensors(b"weights"))
    comps = [c for c in str(ck).split("/") if c]
    parent, fd, pins = open_chain(comps)
    os.close(parent)
    os.close(fd)
    libc = ctypes.CDLL(None, use_errno=True)
    assert exchange(libc, str(ck).encode(), str(adapter).encode())
    with pytest.raises(WalkError) as e:
        remove_pinned(comps, pins)
    assert e.value.code == "changed-since-check" and "exchanged" in e.value.detail
    assert (ck / "adapter_model.safetensors").read_bytes() == safetensors(
        b"weights"
    )  # the adapter, back at its name
    assert sorted(os.listdir(ck.parent)) == ["checkpoint-25"]


def test_an_entry_that_appeared_after_the_check_stops_the_removal(tmp_path):
    ck = tmp_path / "run" / "checkpoints" / "checkpoint-25"
    make_checkpoint(ck)
    comps = [c for c in str(ck).split("/") if c]
    parent, fd, pins = open_chain(comps)
    os.close(parent)
    os.close(fd)
    allowed = inodes(ck)
    (ck / "sub" / "written-after-the-check").write_bytes(b"new")
    with pytest.raises(WalkError) as e:
        remove_pinned(comps, pins, allowed)
    assert e.value.code == "changed-since-check" and "written-after-the-check" in e.value.detail
    assert (ck / "sub" / "written-after-the-check").read_bytes() == b"new"
    assert sorted(os.listdir(ck.parent)) == ["checkpoint-25"]


def test_putting_back_never_replaces_what_took_the_name(tmp_path):
    """The renamed entry goes back with RENAME_NOREPLACE: a file that took its name stays."""
    d = tmp_path / "d"
    d.mkdir()
    (d / "private").write_bytes(b"renamed entry")
    (d / "name").write_bytes(b"newcomer")
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        why = put_back(fd, "private", "name")
    finally:
        os.close(fd)
    assert "could not be put back" in why and "private" in why
    assert (d / "name").read_bytes() == b"newcomer" and (
        d / "private"
    ).read_bytes() == b"renamed entry"
