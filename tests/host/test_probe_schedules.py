"""The probe's schedule listing over a real crontab, real cron.d files, at jobs and real shell loops."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from fleetdeck.backend.host.probe import common as probe_common
from fleetdeck.backend.host.probe import entries as probe_entries
from fleetdeck.backend.host.probe import schedules as probe_schedules
from fleetdeck.backend.host.probe.common import CACHE, Procs

from support.probe import PROBE, probe

CRON_LOCK = "/tmp/fleetdeck-tests-crontab.lock"  # shared with the other crontab tests


def loops_by_pid(rep: dict) -> dict[int, dict]:
    return {s["pid"]: s for s in rep["schedules"] if s["kind"] == "loop"}


def start_ticks(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])


def wait_for_child(pid: int, name: str) -> None:
    """Until `pid` has a child called `name` (a loop's first sleep has started)."""
    for _ in range(500):
        for d in Path("/proc").iterdir():
            if d.name.isdigit():
                try:
                    stat = (d / "stat").read_text()
                except OSError:
                    continue
                if f"({name})" in stat and int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                    return
        time.sleep(0.02)
    raise AssertionError(f"{pid} never started {name}")


@pytest.fixture
def saved_crontab(root_crontab):  # noqa: F811 - the fixture of that name
    """This user's real crontab, restored byte for byte afterwards from cron's own spool file
    (`crontab -l` would turn a carriage return into a literal backslash-r), serialised with the
    other crontab tests; another user's crontab must come out untouched (`root_crontab`)."""
    if shutil.which("crontab") is None:
        pytest.fail("cron's crontab is not installed (the README's test command installs it)")
    yield


@pytest.mark.root
def test_crontab_entry_naming_a_missing_path_is_a_dead_target_with_a_stable_id(
    saved_crontab, tmp_path
):
    missing = tmp_path / "gone dir" / "check-run.sh"
    lines = [
        "# fleetdeck probe test",
        'MAILTO=""',
        f"37 * * * * '{missing}' --inform 'when ready $(date)' >> /var/log/never-created.log 2>&1",
        "*/5 9-17 * * mon-fri /usr/bin/true probe-test-ok",
        "@reboot test -x /nonexistent/daemon && /usr/bin/true probe-test-guarded",
        f"0 3 * * * cat {tmp_path}/gone%stdin text /nonexistent/after-percent",
    ]
    (tmp_path / "tab").write_text("\n".join(lines) + "\n")
    subprocess.run(["crontab", str(tmp_path / "tab")], check=True)
    first, second = probe({}), probe({})
    mine = [
        s
        for s in first["schedules"]
        if s["kind"] == "crontab"
        and s["source"] == "crontab -l"
        and s["user"] == (os.environ.get("USER") or "root")
    ]
    by_line = {s["line"]: s for s in mine}
    assert set(by_line) == {3, 4, 5, 6}
    dead = by_line[3]
    assert dead["raw"] == lines[2] and dead["spec"] == "37 * * * *"
    assert dead["command"].startswith(f"'{missing}' --inform")
    assert dead["reasons"] == ["dead-target"] and dead["missing_paths"] == [str(missing)]
    assert dead["next_run"] and dead["next_run"][14:16] == "37"
    assert by_line[4]["reasons"] == [] and by_line[4]["spec"] == "*/5 9-17 * * mon-fri"
    assert (
        by_line[5]["reasons"] == []
        and by_line[5]["spec"] == "@reboot"
        and by_line[5]["next_run"] is None
    )
    assert by_line[6]["missing_paths"] == [f"{tmp_path}/gone"], (
        "what follows % is stdin, not a command"
    )
    ids = {s["line"]: s["id"] for s in mine}
    assert ids == {s["line"]: s["id"] for s in second["schedules"] if s["id"] in ids.values()}
    assert len(set(ids.values())) == 4 and all(
        i.startswith("c-") and len(i) == 34 for i in ids.values()
    )


def test_a_cron_spec_cron_would_refuse_has_no_next_run_and_raises_nothing():
    """A value past its field's range (an hour of 24, a minute of 60), a name in another
    field's place or a step below 1 is no spec cron runs: no next run. Raising instead dropped
    every crontab or cron file of the poll (the section's guard) for one bad line."""
    now = datetime(2031, 3, 5, 10, 2)
    for spec in (
        "0 24 * * *",
        "60 * * * *",
        "0 0 0 * *",
        "0 0 * 13 *",
        "0 0 * * 8",
        "jan 0 * * *",
        "0 0 * * jan",
        "0 0 * mon *",
        "*/0 * * * *",
        "*/-1 * * * *",
        "5-70 * * * *",
    ):
        assert probe_entries.cron_next(spec, now) is None, spec
    for spec, want in (
        ("0 23 * * *", "2031-03-05T23:00"),
        ("59 * * * *", "2031-03-05T10:59"),
        ("0 0 * mar-apr sun", "2031-03-09T00:00"),
        ("0 0 * * 7", "2031-03-09T00:00"),
        ("*/20 10 * * *", "2031-03-05T10:20"),
    ):
        assert (probe_entries.cron_next(spec, now) or "")[:16] == want, spec


@pytest.mark.root
def test_cron_d_files_that_cron_ignores_are_listed_inactive(tmp_path):
    if not os.access("/etc/cron.d", os.W_OK):
        pytest.skip("/etc/cron.d is not writable here")
    tag = f"fleetdeck-probe-test-{os.getpid()}"
    active, ignored = Path("/etc/cron.d") / tag, Path("/etc/cron.d") / f"{tag}.dpkg-old"
    line = "0 0 31 2 * root /nonexistent/never-fires"  # 31 February: present but never due
    try:
        active.write_text(f"SHELL=/bin/sh\n{line}\n")
        ignored.write_text(f"{line}\n")
        rep = probe({})
    finally:
        active.unlink(missing_ok=True)
        ignored.unlink(missing_ok=True)
    got = {s["source"]: s for s in rep["schedules"] if s["kind"] == "cron-file"}
    a, i = got[str(active)], got[str(ignored)]
    assert (a["active"], a["user"], a["line"], a["raw"]) == (True, "root", 2, line)
    assert a["command"] == "/nonexistent/never-fires" and a["reasons"] == ["dead-target"]
    assert a["next_run"] is None
    assert i["active"] is False and i["line"] == 1
    assert a["id"] != i["id"]


def test_shell_loops_and_watch_are_found_and_a_shell_that_sleeps_once_is_not(children):  # noqa: F811
    loop = subprocess.Popen(["bash", "-c", "while true; do sleep 1; done"])
    colon = subprocess.Popen(["sh", "-c", "while :; do sleep 1; done"])
    sleepy = subprocess.Popen(["bash", "-c", "sleep 60; echo done"])
    watch = (
        subprocess.Popen(
            ["watch", "-n", "30", "true"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=dict(os.environ, TERM="dumb"),
        )
        if shutil.which("watch")
        else None
    )
    # a user's loop that mentions fleetdeck is the user's, and so is one that sets the helper
    # marker: ours is known by descent from the controller's session, never by a marker
    mentions = subprocess.Popen(
        ["bash", "-c", "while true; do sleep 1; done # cp -r ~/.local/state/fleetdeck"]
    )
    ours = subprocess.Popen(
        ["bash", "-c", "while true; do sleep 1; done"], env=dict(os.environ, FLEETDECK_HELPER="1")
    )
    not_a_loop = subprocess.Popen(["bash", "-c", "read line"], stdin=subprocess.PIPE)
    children.extend(
        p for p in (loop, colon, sleepy, watch, mentions, ours, not_a_loop) if p is not None
    )
    wait_for_child(sleepy.pid, "sleep")
    first, second = probe({}), probe({})
    found = loops_by_pid(first)
    assert found[loop.pid]["command"] == "while true; do sleep 1; done"
    assert (
        found[loop.pid]["start_time"] == start_ticks(loop.pid)
        and found[loop.pid]["source"] == f"/proc/{loop.pid}"
    )
    assert colon.pid in found and "while-loop" in found[colon.pid]["spec"]
    assert sleepy.pid not in found, "one sleep on the way is not a loop"
    if watch is not None and watch.poll() is None:  # watch may refuse a terminal-less start
        assert (
            found[watch.pid]["spec"] == "watch every 30s"
            and found[watch.pid]["command"] == "-n 30 true"
        )
    assert ours.pid in found, "a marker in the environment proves nothing"
    assert mentions.pid in found, "a user's loop that names fleetdeck is still the user's"
    assert not_a_loop.pid not in found
    again = loops_by_pid(second)
    assert all(again[p]["id"] == s["id"] for p, s in found.items() if p in again)
    assert found[loop.pid]["id"].startswith("l-")


def test_the_probe_never_lists_itself_or_the_loop_that_started_it(tmp_path, children):  # noqa: F811
    out = tmp_path / "reply.json"
    req = json.dumps({"op": "snapshot"})
    # a loop that is the probe's own parent: listed by every other probe, never by its child
    parent = subprocess.Popen(
        [
            "bash",
            "-c",
            'while true; do "$0" "$1" "$2" > "$3.tmp"; mv "$3.tmp" "$3"; sleep 60; done',
            sys.executable,
            str(PROBE),
            req,
            str(out),
        ]
    )
    children.append(parent)
    for _ in range(1000):
        if out.exists():
            break
        time.sleep(0.02)
    rep = json.loads(out.read_text())
    assert parent.pid not in loops_by_pid(rep)
    assert rep["pid"] not in loops_by_pid(rep)
    assert parent.pid in loops_by_pid(probe({})), "the same loop, seen from outside, is listed"


@pytest.mark.root
def test_at_job_is_listed_with_its_command(tmp_path):
    if shutil.which("at") is None or shutil.which("atq") is None:
        pytest.skip("at is not installed")
    cmd = "/nonexistent/at-target --say 'check on the run $(x)'"
    p = subprocess.run(["at", "now + 3 hours"], input=cmd + "\n", capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip(f"at refused a job: {p.stderr.strip()}")
    job = next(w for w in p.stderr.split("\n") if w.startswith("job ")).split()[1]
    try:
        rep = probe({})
    finally:
        subprocess.run(["atrm", job], check=False)
    (s,) = [s for s in rep["schedules"] if s["kind"] == "at" and s["job"] == job]
    assert s["command"] == cmd and s["reasons"] == ["dead-target"] and s["next_run"]
    assert s["user"] and s["id"].startswith("a-")


class _HostClock(datetime):
    """The host's clock as the probe reads it, set by the test (`at`)."""

    at = datetime(2031, 3, 5, 5, 50, 30)

    @classmethod
    def now(cls, tz=None):
        return cls.at


@pytest.mark.root
def test_a_cached_crontab_and_cron_file_give_the_next_run_of_each_polls_clock(
    saved_crontab, tmp_path, monkeypatch
):
    """The resident probe keeps what it parsed between polls; at 05:51:16 an entry for minute
    51 next runs at 06:51, never at the 05:51 that the 05:50 poll worked out."""
    line = "51 * * * * /usr/bin/true fleetdeck-next-run-test"
    (tmp_path / "tab").write_text(line + "\n")
    subprocess.run(["crontab", str(tmp_path / "tab")], check=True)
    cron_d = Path("/etc/cron.d") / f"fleetdeck-next-run-test-{os.getpid()}"
    system = "51 * * * * root /usr/bin/true fleetdeck-next-run-test"
    writable = os.access("/etc/cron.d", os.W_OK)
    monkeypatch.setattr(probe_entries, "datetime", _HostClock)
    polls = []
    try:
        if writable:
            cron_d.write_text(system + "\n")
        for at in (
            datetime(2031, 3, 5, 5, 50, 30),
            datetime(2031, 3, 5, 5, 51, 16),
            datetime(2031, 3, 5, 7, 2, 0),
        ):
            _HostClock.at = at
            polls.append(probe_schedules.schedules({}, Procs(), []))
    finally:
        cron_d.unlink(missing_ok=True)
    assert CACHE.get(("crontab", "root")) is not None, "the crontab's parse is cached between polls"
    for kind, raw in (
        (("crontab", line), ("cron-file", system)) if writable else (("crontab", line),)
    ):
        got = [
            [s["next_run"] for s in poll if s["kind"] == kind and s["raw"] == raw] for poll in polls
        ]
        assert [n[:19] for (n,) in got] == [
            "2031-03-05T05:51:00",
            "2031-03-05T06:51:00",
            "2031-03-05T07:51:00",
        ], kind


def test_a_cached_timer_listing_is_asked_again_once_a_next_run_it_holds_has_passed(
    tmp_path, monkeypatch
):
    """systemd's listing is kept a while between polls, never past the first next run in it."""
    booted = tmp_path / "booted"
    booted.mkdir()
    monkeypatch.setattr(probe_schedules, "SYSTEMD_BOOTED", str(booted))
    bin_dir, nxt = tmp_path / "bin", tmp_path / "next"
    bin_dir.mkdir()
    fake = bin_dir / "systemctl"  # what systemd answers, read from the `next` file
    fake.write_text(f"""#!/bin/sh
case " $* " in *" --user "*) exit 1;; esac
case "$1" in
list-timers) printf '[{{"unit": "fd-test.timer", "activates": "fd-test.service", "next": %s}}]' "$(cat {nxt})";;
show) printf 'Id=fd-test.timer\\nActiveState=active\\nTimersCalendar={{ OnCalendar=hourly ; next_elapse=x }}\\nUnit=fd-test.service\\n\\nId=fd-test.service\\nExecStart={{ path=/usr/bin/true ; argv[]=/usr/bin/true fd-test ; }}\\nUser=root\\n';;
esac
""")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    CACHE.pop(("timers", ""), None)
    soon, later = time.time() + 2, time.time() + 3600
    nxt.write_text(str(int(soon * 1e6)))
    (first,) = probe_schedules._timers(False)
    assert first["unit"] == "fd-test.timer" and first["next_run"] == probe_common.iso(soon)
    nxt.write_text(str(int(later * 1e6)))  # the timer fired; systemd now says an hour on
    assert probe_schedules._timers(False) == [first], "within its next run the listing is kept"
    time.sleep(max(0.0, soon - time.time()) + 0.2)
    (second,) = probe_schedules._timers(False)
    assert second["next_run"] == probe_common.iso(later)
    CACHE.pop(("timers", ""), None)


def test_a_timer_unit_made_in_a_watched_folder_is_listed_at_the_next_poll(tmp_path, monkeypatch):
    """The timers' listing is kept between polls, but a change in a folder timer units live in
    (a unit written, enabled, or a transient one started) lists them again at once, before its
    TIMER_TTL runs out."""
    booted = tmp_path / "booted"
    booted.mkdir()
    units = tmp_path / "units.d"
    units.mkdir()
    old = time.time() - 60
    os.utime(units, (old, old))
    monkeypatch.setattr(probe_schedules, "SYSTEMD_BOOTED", str(booted))
    monkeypatch.setattr(probe_schedules, "TIMER_DIRS", (str(units),))
    bin_dir, listing = tmp_path / "bin", tmp_path / "listing"
    bin_dir.mkdir()
    fake = bin_dir / "systemctl"  # what systemd answers: the units named in `listing`
    fake.write_text(f"""#!/bin/sh
case " $* " in *" --user "*) exit 1;; esac
case "$1" in
list-timers) cat {listing};;
esac
""")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")

    def answer(*names):
        listing.write_text(json.dumps([{"unit": n, "activates": "x.service"} for n in names]))

    CACHE.pop(("timers", ""), None)
    try:
        answer("a.timer")
        assert [t["unit"] for t in probe_schedules._timers(False)] == ["a.timer"]
        answer("a.timer", "b.timer")
        assert [t["unit"] for t in probe_schedules._timers(False)] == ["a.timer"], (
            "with nothing changed in its folders the listing is kept (the cache is in use)"
        )
        (units / "b.timer").write_text("[Timer]\nOnCalendar=hourly\n")
        got = [t["unit"] for t in probe_schedules._timers(False)]
        assert sorted(got) == ["a.timer", "b.timer"]
    finally:
        CACHE.pop(("timers", ""), None)
