"""What a resident probe keeps between polls never hides a change: a new process, a process that
execs another program, a process that exits, a pid reused, a crontab rewritten within its mtime's
tick, a mount, the next run of a cron spec once it has passed. Each test makes the change for
real (or forges the one state a cache could be fooled by) and asserts the next poll shows it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import datetime

import pytest

from fleetdeck.backend.host.probe import entries as probe_entries
from fleetdeck.backend.host.probe.common import cached
from fleetdeck.backend.host.probe.main import DiskCadence, MountTable
from fleetdeck.backend.host.probe.proc_table import FULL_EVERY, ProcTable

from support.probe import PROBE


def _wait(cond, what, seconds=30.0):
    deadline = time.monotonic() + seconds
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _stopped(pid):
    os.kill(pid, signal.SIGSTOP)
    _wait(lambda: _state(pid) == "T", "the stop")


def _state(pid):
    with open(f"/proc/{pid}/stat", "rb") as f:
        return f.read().rpartition(b")")[2].split()[0].decode()


def _comm(pid):
    with open(f"/proc/{pid}/comm") as f:
        return f.read().strip()


class _Resident:
    """The bundled probe running resident, as the poller keeps it: one request line in, one
    answer line out."""

    def __init__(self):
        env = dict(os.environ, FLEETDECK_PROBE_GPU="none")
        self.p = subprocess.Popen(
            [sys.executable, str(PROBE), "--resident"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )

    def poll(self):
        assert self.p.stdin is not None and self.p.stdout is not None
        self.p.stdin.write(json.dumps({"op": "snapshot", "runs": []}) + "\n")
        self.p.stdin.flush()
        return json.loads(self.p.stdout.readline())

    def close(self):
        if self.p.stdin is not None:
            self.p.stdin.close()
        self.p.wait(timeout=30)


def _listed(answer, pid):
    return {p["pid"]: p for p in answer["processes"]}.get(pid)


def test_a_resident_probe_sees_a_new_process_its_exec_and_its_exit(children):
    """A stopped process is always listed (with its command): the resident probe lists a new
    one, then the program it exec'd into (same pid, same start time, a new command line),
    then nothing once it is gone, each at the very next poll."""
    probe = _Resident()
    try:
        probe.poll()  # the first walk reads everything; the ones below are incremental
        sh = subprocess.Popen(
            ["sh", "-c", "read x; exec sleep 301"], stdin=subprocess.PIPE, text=True
        )
        children.append(sh)
        _wait(lambda: _comm(sh.pid) == "sh", "the shell")
        _stopped(sh.pid)
        first = _listed(probe.poll(), sh.pid)
        assert first is not None and "stopped" in first["why"], "a new process is listed"
        assert first["command"] == "sh -c read x; exec sleep 301"

        os.kill(sh.pid, signal.SIGCONT)
        assert sh.stdin is not None
        sh.stdin.write("\n")
        sh.stdin.flush()
        _wait(lambda: _comm(sh.pid) == "sleep", "the exec")
        _stopped(sh.pid)
        second = _listed(probe.poll(), sh.pid)
        assert second is not None and second["start"] == first["start"]
        assert second["command"] == "sleep 301", "the exec'd program's command line is read"

        sh.kill()
        sh.wait()
        assert _listed(probe.poll(), sh.pid) is None, "a process gone is not listed"
    finally:
        probe.close()


def test_a_command_line_kept_wrongly_is_read_again_within_full_every_walks(children):
    """Forge the one state the table could be fooled by (a command line that changed while the
    stat did not move): every FULL_EVERY walks each command line is read again, so it cannot
    last longer than that."""
    p = subprocess.Popen(["sleep", "302"])
    children.append(p)
    table = ProcTable()
    _wait(lambda: p.pid in table.walk(), "the sleeper in /proc")
    _wait(lambda: _comm(p.pid) == "sleep", "the exec of sleep")
    table.walk(fresh=True)
    rec = table.recs[p.pid]
    raw = rec[1]
    assert raw == "sleep\x00302\x00"
    table.recs[p.pid] = (rec[0], "forged\0") + rec[2:]
    table.walks = 1  # the next full walk is the FULL_EVERY-th from here
    seen = [table.walk()[p.pid][1] for _ in range(FULL_EVERY)]
    assert seen[0] == "forged\0", "an unmoved stat keeps what was read (the cache is in use)"
    assert seen[-1] == "sleep\x00302\x00", seen


def test_a_pid_with_another_start_time_is_a_new_process(children):
    """A reused pid is a new process: a record of the same pid with another start time (and
    another stat text) is never taken for it; its command line is read."""
    p = subprocess.Popen(["sleep", "303"])
    children.append(p)
    table = ProcTable()
    _wait(lambda: p.pid in table.walk(), "the sleeper in /proc")
    _wait(lambda: _comm(p.pid) == "sleep", "the exec of sleep")
    rec = table.recs[p.pid]
    st = rec[0]
    earlier = st[:4] + (st[4] - 1,) + st[5:]
    table.recs[p.pid] = (earlier, "someone\0else\0", b"an older stat", "someone") + rec[4:]
    assert table.walk()[p.pid][1] == "sleep\x00303\x00"


def test_a_file_rewritten_within_its_mtimes_tick_is_parsed_again(tmp_path):
    """The same size, the same inode, the same mtime to the nanosecond: a parse kept against
    that key is still not trusted while the mtime is recent, so the new text is read."""
    f = tmp_path / "crontab"
    f.write_text("0 1 * * * a\n")
    st = os.stat(f)
    assert cached("test", str(f), lambda p: open(p).read()) == "0 1 * * * a\n"
    with open(f, "r+") as w:  # in place: the inode stays
        w.write("0 1 * * * b\n")
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    again = os.stat(f)
    assert (again.st_mtime_ns, again.st_size, again.st_ino) == (
        st.st_mtime_ns,
        st.st_size,
        st.st_ino,
    )
    assert cached("test", str(f), lambda p: open(p).read()) == "0 1 * * * b\n"


def test_a_path_a_command_names_is_looked_for_at_every_call(tmp_path):
    """What a command names is read once; whether each path exists is asked every time, so a
    target made or removed shows at the next poll."""
    target = tmp_path / "job.sh"
    command = f"{target} --quiet >/dev/null"
    assert probe_entries.missing_paths(command) == [str(target)]
    target.write_text("#!/bin/sh\n")
    assert probe_entries.missing_paths(command) == []
    target.unlink()
    assert probe_entries.missing_paths(command) == [str(target)]


def test_a_kept_next_run_is_given_only_until_it_passes_and_never_after_a_clock_step_back():
    """cron_next keeps the fire time it found; a later poll before it gets it again, one after
    it the next one, and a clock set back an earlier one."""
    spec = "*/5 * * * *"
    at = [
        datetime(2031, 3, 5, 10, 2, 10),
        datetime(2031, 3, 5, 10, 3, 59),
        datetime(2031, 3, 5, 10, 5, 30),
        datetime(2031, 3, 5, 9, 0, 0),
    ]
    got = [probe_entries.cron_next(spec, now)[:19] for now in at]
    assert got == [
        "2031-03-05T10:05:00",
        "2031-03-05T10:05:00",
        "2031-03-05T10:10:00",
        "2031-03-05T09:05:00",
    ]


@pytest.mark.root
@pytest.mark.skipif(shutil.which("mount") is None, reason="needs mount(8)")
def test_a_mount_made_or_removed_shows_at_the_next_look(tmp_path):
    """The mount table is kept between polls and read again when the kernel says it changed:
    a tmpfs mounted, then unmounted, shows at the next look each time."""
    if os.geteuid() != 0:
        pytest.skip("needs root (a tmpfs mount)")
    mnt = tmp_path / "m"
    mnt.mkdir()
    table = MountTable()
    table.mounts()
    table.mounts()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], check=True)
    try:
        assert str(mnt) in [m[0] for m in table.mounts()]
    finally:
        subprocess.run(["umount", str(mnt)], check=True)
    assert str(mnt) not in [m[0] for m in table.mounts()]


def test_disks_are_stat_again_only_after_their_cadence_when_asked_fresh_or_for_other_folders(
    tmp_path,
):
    """A resident probe keeps where each disk is: a folder made since still reads as missing
    (its parent's figures) until the cadence passes; a fresh poll resolves it at once, and so
    does a different list of folders or a folder that went away; with the cadence at zero
    every poll resolves them."""
    cadence = DiskCadence()
    cadence.EVERY_S = 3600.0
    late = tmp_path / "late"
    (first,) = cadence.read([str(late)])
    assert "does not exist" in first["error"]
    late.mkdir()
    assert "does not exist" in cadence.read([str(late)])[0]["error"]  # kept
    assert cadence.read([str(late), str(tmp_path)])[0]["error"] is None  # other folders
    (late / "x").mkdir()
    first["error"] = "changed by the caller"  # a caller's edit does not reach the kept copy
    again = cadence.read([str(late), str(tmp_path)])
    assert again[0]["error"] is None and again[1]["path"] == str(tmp_path)
    gone = tmp_path / "gone"
    gone.mkdir()
    assert cadence.read([str(gone)])[0]["error"] is None
    gone.rmdir()
    assert "does not exist" in cadence.read([str(gone)])[0]["error"]  # its statvfs failed
    gone.mkdir()
    assert "does not exist" in cadence.read([str(gone)])[0]["error"]  # kept
    assert cadence.read([str(gone)], fresh=True)[0]["error"] is None
    cadence.EVERY_S = 0.0
    later = tmp_path / "later"
    assert "does not exist" in cadence.read([str(later)])[0]["error"]
    later.mkdir()
    assert cadence.read([str(later)])[0]["error"] is None


@pytest.mark.root
@pytest.mark.skipif(shutil.which("mount") is None, reason="needs mount(8)")
def test_a_filling_disk_is_seen_at_every_poll_between_resolutions(tmp_path):
    """Between two resolutions of where a folder is, its figures are still read at every poll:
    a tmpfs that fills by 16 MiB shows it at the next look (the disk-full rule's slope needs
    each poll's figures), and a folder removed is resolved again at once."""
    if os.geteuid() != 0:
        pytest.skip("needs root (a tmpfs mount)")
    mnt = tmp_path / "tank"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mnt)], check=True)
    try:
        runs = mnt / "runs"
        runs.mkdir()
        cadence = DiskCadence()
        cadence.EVERY_S = 3600.0
        (before,) = cadence.read([str(runs)])
        assert before["mount"] == str(mnt) and before["error"] is None
        (runs / "blob").write_bytes(b"\0" * (16 << 20))
        (after,) = cadence.read([str(runs)])
        assert after["used_bytes"] - before["used_bytes"] >= 16 << 20
        assert after["free_bytes"] <= before["free_bytes"] - (16 << 20)
        (runs / "blob").unlink()
        runs.rmdir()
        (gone,) = cadence.read([str(runs)])  # resolved again: its figures are the parent's
        assert "does not exist" in gone["error"] and gone["mount"] == str(mnt)
    finally:
        subprocess.run(["umount", str(mnt)], check=True)
