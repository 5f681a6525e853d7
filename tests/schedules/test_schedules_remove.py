"""Schedule removal against real crontabs, cron files, at jobs and processes (local and over sshd)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleetdeck.backend.actions import audit
from fleetdeck.backend.actions.schedules import check_removal, remove_schedule
from fleetdeck.backend.fleet.config import HostConfig, load_fleet
from fleetdeck.backend.fleet.link.ssh import HostLink
from fleetdeck.backend.fleet.models import Schedule

from support.crontab import CRONTAB_BIN, backups, install_crontab, read_crontab

HOSTILE = "echo \"a b\" '$(touch /tmp/fleetdeck-pwned)' -rf --x; echo done\\%"
LOCAL = HostConfig(name="local", local=True, python=sys.executable, command_timeout=20)

needs_crontab = pytest.mark.skipif(
    shutil.which("crontab") is None, reason="cron's crontab is not installed"
)


def cron_sched(raw: str, line: int, host: str = "local", sid: str = "cron-1") -> Schedule:
    parts = raw.split(None, 5)
    return Schedule(
        id=sid,
        host=host,
        kind="crontab",
        user=os.environ.get("USER") or "root",
        spec=" ".join(parts[:5]),
        command=parts[5],
        source="crontab",
        raw=raw,
        line=line,
    )


def audit_results(action: str = "schedule-remove") -> list[str]:
    return [r["result"] for r in audit.read_audit() if r["action"] == action]


CRONTAB = (
    "# keep this comment\n"
    'MAILTO=""\n'
    "*/5 * * * * /usr/bin/true keep-1\n"
    f"37 * * * * {HOSTILE}\n"
    "@reboot /usr/bin/true keep-2\n"
)


@needs_crontab
@pytest.mark.root
async def test_crontab_entry_removed_others_untouched_backups_written(root_crontab, tmp_path):
    install_crontab(CRONTAB, tmp_path)
    sched = cron_sched(f"37 * * * * {HOSTILE}", 4)
    hb = tmp_path / "host backups"
    rep = await remove_schedule(HostLink(LOCAL), sched, "cron-1", host_backup_dir=str(hb))
    assert rep.ok, rep
    after = read_crontab()
    assert after == CRONTAB.replace(f"37 * * * * {HOSTILE}\n", "").encode()
    (ctl,) = backups("local")
    assert ctl.read_bytes() == CRONTAB.encode() and rep.backup == str(ctl)
    assert (
        Path(rep.host_backup).parent == hb
        and Path(rep.host_backup).read_bytes() == CRONTAB.encode()
    )
    assert stat.S_IMODE(ctl.stat().st_mode) == 0o600
    # the two backups are told apart: the host's named as the host's
    assert rep.message.endswith(f"; its backup on the host: {rep.host_backup}"), rep.message
    assert not Path("/tmp/fleetdeck-pwned").exists()
    assert audit_results() == ["started", "done"]
    assert "line 4" in audit.read_audit()[0]["plan"]
    done = audit.read_audit()[-1]
    assert done["checks"]["matches_listing"] and done["checks"]["sha256"]
    assert (
        done["confirmation"] == "cron-1"
        and done["backup"] == str(ctl)
        and done["schedule"]["raw"] == sched.raw
    )


@needs_crontab
@pytest.mark.root
async def test_crontab_changed_between_listing_and_removal_is_refused_untouched(
    root_crontab, tmp_path
):
    sched = cron_sched(f"37 * * * * {HOSTILE}", 4)  # as listed from CRONTAB
    changed = CRONTAB.replace("MAILTO", "# someone ran crontab -e\nMAILTO")
    install_crontab(changed, tmp_path)
    rep = await remove_schedule(
        HostLink(LOCAL), sched, "cron-1", host_backup_dir=str(tmp_path / "hb")
    )
    assert not rep.ok and rep.reason_code == "changed-since-listing" and rep.result == "refused"
    assert "line 4" in rep.message
    assert read_crontab() == changed.encode()
    assert backups("local") == [] and not (tmp_path / "hb").exists()
    assert audit_results() == ["started", "refused"]


@needs_crontab
@pytest.mark.root
async def test_no_crontab_at_all_is_an_empty_crontab_and_refuses(root_crontab):
    subprocess.run([CRONTAB_BIN, "-r"], capture_output=True)
    rep = await remove_schedule(HostLink(LOCAL), cron_sched("* * * * * /usr/bin/true", 1), "cron-1")
    assert rep.reason_code == "changed-since-listing" and "0 lines" in rep.message
    assert read_crontab() is None


@needs_crontab
@pytest.mark.root
async def test_crontab_that_cannot_be_read_is_never_treated_as_empty(
    root_crontab, tmp_path, monkeypatch
):
    install_crontab(CRONTAB, tmp_path)
    # a crontab binary whose -l fails the way a broken spool does; installing is only logged
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "install.log"
    fake = bin_dir / "crontab"
    fake.write_text(
        f'#!/bin/sh\nif [ "$1" = "-l" ]; then echo "crontab: Input/output error" >&2; exit 1; fi\n'
        f'echo "$@" >> "{log}"\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    rep = await remove_schedule(HostLink(LOCAL), cron_sched(f"37 * * * * {HOSTILE}", 4), "cron-1")
    assert rep.reason_code == "crontab-unreadable" and "Input/output error" in rep.message
    assert not log.exists()
    assert read_crontab() == CRONTAB.encode()


@needs_crontab
@pytest.mark.parametrize(
    "typed", [None, "", "cron-", "cron-1 ", "CRON-1", "cron-1\n", "cron-\u0131"]
)
@pytest.mark.root
async def test_wrong_confirmation_changes_nothing(root_crontab, tmp_path, typed):
    install_crontab(CRONTAB, tmp_path)
    sched = cron_sched(f"37 * * * * {HOSTILE}", 4)
    rep = await remove_schedule(HostLink(LOCAL), sched, typed)
    assert not rep.ok and rep.reason_code == "not-confirmed"
    assert read_crontab() == CRONTAB.encode() and backups("local") == []
    (rec,) = audit.read_audit()
    assert (
        rec["result"] == "refused"
        and rec["confirmation"] == typed
        and rec["reason_code"] == "not-confirmed"
    )


async def test_cron_file_line_removed_atomically_mode_kept(tmp_path):
    d = tmp_path / "cron.d $(x) 'q'"
    d.mkdir()
    f = d / "-train chain"
    body = "SHELL=/bin/sh\n0 * * * * root /usr/bin/true keep\n37 * * * * root /bin/echo 'check on the run'\n"
    f.write_text(body)
    os.chmod(f, 0o640)
    ino = f.stat().st_ino
    raw = "37 * * * * root /bin/echo 'check on the run'"
    sched = Schedule(
        id="cf-1",
        host="local",
        kind="cron-file",
        user="root",
        spec="37 * * * *",
        command="/bin/echo 'check on the run'",
        source=str(f),
        raw=raw,
        line=3,
    )
    rep = await remove_schedule(
        HostLink(LOCAL), sched, "cf-1", host_backup_dir=str(tmp_path / "hb")
    )
    assert rep.ok, rep
    assert f.read_text() == "SHELL=/bin/sh\n0 * * * * root /usr/bin/true keep\n"
    assert stat.S_IMODE(f.stat().st_mode) == 0o640 and f.stat().st_ino != ino  # replaced by rename
    assert sorted(p.name for p in d.iterdir()) == ["-train chain"]  # no temp file left behind
    assert Path(rep.host_backup).read_text() == body and Path(rep.backup).read_text() == body


async def test_cron_file_that_is_a_symlink_is_refused(tmp_path):
    real = tmp_path / "real"
    real.write_text("37 * * * * root /bin/true\n")
    link = tmp_path / "cronlink"
    link.symlink_to(real)
    sched = Schedule(
        id="cf-2",
        host="local",
        kind="cron-file",
        user="root",
        spec="37 * * * *",
        command="/bin/true",
        source=str(link),
        raw="37 * * * * root /bin/true",
        line=1,
    )
    rep = await remove_schedule(HostLink(LOCAL), sched, "cf-2")
    assert not rep.ok and rep.reason_code == "unsupported"
    assert real.read_text() == "37 * * * * root /bin/true\n" and link.is_symlink()


# -- loops --------------------------------------------------------------------------------------
def start_time(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[19])


def spawn_loop(script: str) -> subprocess.Popen:
    p = subprocess.Popen(["bash", "-c", script], start_new_session=True)
    # the shell must have reached its loop (trap installed) before it is signalled
    for _ in range(200):
        kids = Path(f"/proc/{p.pid}/task/{p.pid}/children").read_text().split()
        if kids:
            break
        time.sleep(0.01)
    return p


def loop_sched(p: subprocess.Popen, start: int | None = None) -> Schedule:
    return Schedule(
        id=f"loop-{p.pid}",
        host="local",
        kind="loop",
        user="root",
        spec="while true",
        command="bash -c loop",
        source="process",
        pid=p.pid,
        start_time=start_time(p.pid) if start is None else start,
    )


async def test_loop_stopped_with_sigterm(children):
    p = spawn_loop("while true; do sleep 0.2; done")
    children.append(p)
    s = loop_sched(p)
    check = await check_removal(HostLink(LOCAL), s)
    assert check.ok and not check.interactive
    rep = await remove_schedule(HostLink(LOCAL), s, s.id)
    assert rep.ok, rep
    assert rep.signals == ("SIGTERM",)
    assert p.wait(timeout=10) == -signal.SIGTERM


async def test_loop_ignoring_sigterm_is_killed_after_grace(children):
    p = spawn_loop("trap '' TERM; while true; do sleep 0.2; done")
    children.append(p)
    s = loop_sched(p)
    rep = await remove_schedule(HostLink(LOCAL), s, s.id, grace=0.5)
    assert rep.ok, rep
    assert rep.signals == ("SIGTERM", "SIGKILL")
    assert p.wait(timeout=10) == -signal.SIGKILL
    assert audit_results() == ["started", "done"]
    assert audit.read_audit()[-1]["signals"] == ["SIGTERM", "SIGKILL"]


async def test_loop_whose_start_time_changed_is_refused_and_left_running(children):
    p = spawn_loop("while true; do sleep 0.2; done")
    children.append(p)
    s = loop_sched(p, start=start_time(p.pid) + 1)  # the pid now names a different process
    rep = await remove_schedule(HostLink(LOCAL), s, s.id)
    assert not rep.ok and rep.reason_code == "changed-since-listing"
    assert p.poll() is None
    assert audit_results() == ["started", "refused"]


async def test_loop_already_gone_is_refused_not_found(children):
    p = spawn_loop("while true; do sleep 0.2; done")
    s = loop_sched(p)
    p.kill()
    p.wait()
    rep = await remove_schedule(HostLink(LOCAL), s, s.id)
    assert rep.reason_code == "not-found"


async def test_interactive_shell_is_named_before_and_after(children):
    # an interactive bash on a real pseudo-terminal, running a loop typed at its prompt
    import pty

    pid, fd = pty.fork()
    if pid == 0:
        os.execvp("bash", ["-bash", "--norc", "--noprofile", "-i"])
    try:
        os.write(fd, b"while true; do sleep 0.2; done\n")
        s = Schedule(
            id="sh-1",
            host="local",
            kind="loop",
            user="root",
            spec="while true",
            command="-bash",
            source="process",
            pid=pid,
            start_time=start_time(pid),
        )
        check = await check_removal(HostLink(LOCAL), s)
        assert check.ok and check.interactive and check.tty and check.tty.startswith("/dev/pts/")
        assert "interactive shell" in check.warning
        rep = await remove_schedule(HostLink(LOCAL), s, "sh-1", grace=0.5)
        assert rep.ok and rep.interactive and "interactive shell" in rep.message
        # an interactive bash ignores SIGTERM: it took SIGKILL
        assert rep.signals == ("SIGTERM", "SIGKILL")
        assert os.waitpid(pid, 0)[1] == signal.SIGKILL
    finally:
        os.close(fd)
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


# -- at jobs ---------------------------------------------------------------------------------
def at_job(command: str) -> str:
    p = subprocess.run(
        ["at", "now + 3 hours"], input=command + "\n", capture_output=True, text=True
    )
    m = re.search(r"job (\d+) at", p.stderr)
    if p.returncode != 0 or not m:
        pytest.skip(f"at cannot queue a job here: {p.stderr.strip()}")
    return m.group(1)


@pytest.mark.skipif(
    shutil.which("at") is None or shutil.which("atrm") is None, reason="at is not installed"
)
@pytest.mark.root
async def test_at_job_removed_only_while_it_still_matches():
    # atd need not run: `at` queues into the spool and atrm removes from it
    cmd = "/bin/echo 'check on the run $(x)' > /dev/null"
    job = at_job(cmd)
    try:
        wrong = Schedule(
            id="at-x",
            host="local",
            kind="at",
            user="root",
            spec="later",
            command="/bin/other",
            source="atq",
            job=job,
        )
        rep = await remove_schedule(HostLink(LOCAL), wrong, "at-x")
        assert rep.reason_code == "changed-since-listing"
        assert subprocess.run(["at", "-c", job], capture_output=True).returncode == 0
        s = Schedule(
            id="at-1",
            host="local",
            kind="at",
            user="root",
            spec="later",
            command=cmd,
            source="atq",
            job=job,
        )
        rep = await remove_schedule(HostLink(LOCAL), s, "at-1")
        assert rep.ok, rep
        assert subprocess.run(["at", "-c", job], capture_output=True).returncode != 0
    finally:
        subprocess.run(["atrm", job], capture_output=True)


async def test_unknown_kind_and_bad_timer_unit_are_refused():
    s = Schedule(
        id="t-1",
        host="local",
        kind="systemd-timer",
        user="root",
        spec="daily",
        command="x",
        source="systemd",
        unit="--now; reboot",
        scope="system",
    )
    rep = await remove_schedule(HostLink(LOCAL), s, "t-1")
    assert rep.reason_code == "unsupported"
    odd = Schedule(
        id="o", host="local", kind="anacron", user="root", spec="", command="", source=""
    )
    assert (await remove_schedule(HostLink(LOCAL), odd, "o")).reason_code == "unsupported"


# -- over a real sshd host ---------------------------------------------------------------------
@needs_crontab
@pytest.mark.sshd
@pytest.mark.root
async def test_crontab_entry_removed_over_ssh(root_crontab, sshd_fleet, tmp_path):
    install_crontab(CRONTAB, tmp_path)
    fleet = load_fleet(str(sshd_fleet.write_fleet(tmp_path / "hosts.toml", names=["h1"])))
    h1 = fleet.host("h1")
    link = HostLink(h1)
    try:
        sched = cron_sched("*/5 * * * * /usr/bin/true keep-1", 3, host="h1", sid="c-ssh")
        hb = sshd_fleet.hosts["h1"].root / "backups"
        rep = await remove_schedule(link, sched, "c-ssh", host_backup_dir=str(hb))
    finally:
        await link.close()
    assert rep.ok, rep
    assert read_crontab() == CRONTAB.replace("*/5 * * * * /usr/bin/true keep-1\n", "").encode()
    assert Path(rep.host_backup).read_bytes() == CRONTAB.encode()
    assert [p.read_bytes() for p in backups("h1")] == [CRONTAB.encode()]
    assert [(r["host"], r["result"]) for r in audit.read_audit()] == [
        ("h1", "started"),
        ("h1", "done"),
    ]


def run_bundled(req: dict, python: str = sys.executable) -> dict:
    """The helper exactly as a host runs it: the bundled payload, the request as JSON on stdin."""
    import json

    from fleetdeck.backend.actions.schedules import REMOTE
    from fleetdeck.backend.fleet.link.bundle import bundle

    p = subprocess.run(
        [python, "-c", bundle(REMOTE)],
        input=json.dumps(req).encode(),
        capture_output=True,
        env=dict(os.environ, FLEETDECK_HELPER="1"),
        timeout=60,
    )
    assert p.stdout, p.stderr
    return json.loads(p.stdout)


@pytest.mark.parametrize(
    "req, code",
    [
        ({"op": "remove-everything"}, "bad-request"),
        ({"op": "inspect", "schedule": {"kind": "anacron"}}, "unsupported"),
        (
            {"op": "apply", "schedule": {"kind": "loop", "pid": "1; reboot", "start_time": 1}},
            "unsupported",
        ),
    ],
)
def test_bundled_helper_answers_in_the_one_error_shape(req, code):
    ans = run_bundled(req)
    assert ans["ok"] is False and ans["error"]["code"] == code and ans["error"]["message"]
    assert set(ans) == {"ok", "error"}


PY38 = "/root/.pyenv/versions/3.8.18/bin/python3.8"


@pytest.mark.skipif(not os.path.exists(PY38), reason="pyenv's Python 3.8 is not installed here")
def test_bundled_helper_stops_a_loop_under_python_3_8(children):
    # the host's Python may be 3.8: the helper and the host library it carries must run there
    p = spawn_loop("while true; do sleep 300; done")
    children.append(p)
    s = loop_sched(p)
    req = {
        "op": "apply",
        "grace": 1.0,
        "schedule": {"kind": "loop", "pid": s.pid, "start_time": s.start_time},
    }
    ans = run_bundled(req, python=PY38)
    assert ans["ok"] is True and ans["signals"] == ["SIGTERM"] and ans["children"], ans
    assert p.wait(timeout=10) == -signal.SIGTERM
    bad = run_bundled(
        {"op": "inspect", "schedule": {"kind": "crontab", "user": "root", "line": 1}}, python=PY38
    )
    assert bad["error"]["code"] == "unsupported"


# -- witnesses: "removed" names what was re-read and found gone; nothing to remove is a refusal ----
def _cron_file(tmp_path: Path, body: str) -> Path:
    f = tmp_path / "cron.d" / "fleetdeck-witness"
    f.parent.mkdir(exist_ok=True)
    f.write_text(body)
    return f


def _cron_file_sched(f: Path, raw: str, line: int, sid: str = "cf-w") -> Schedule:
    return Schedule(
        id=sid,
        host="local",
        kind="cron-file",
        user="root",
        spec="",
        command=raw,
        source=str(f),
        raw=raw,
        line=line,
    )


async def test_a_removed_cron_line_names_its_witness_the_file_re_read_one_line_shorter(tmp_path):
    body = "SHELL=/bin/sh\n0 * * * * root /usr/bin/true keep\n37 * * * * root /bin/echo 'check on the run'\n"
    f = _cron_file(tmp_path, body)
    sched = _cron_file_sched(f, "37 * * * * root /bin/echo 'check on the run'", 3)
    rep = await remove_schedule(
        HostLink(LOCAL), sched, "cf-w", host_backup_dir=str(tmp_path / "hb")
    )
    assert rep.ok, rep
    assert (
        f"(re-read, {f} holds 2 lines, one fewer than the 3 before, byte for byte the file without "
        "line 3)"
    ) in rep.message
    assert audit.read_audit()[-1]["message"] == rep.message


@pytest.mark.parametrize(
    "line,why", [(2, "it is blank"), (3, "it reads # a comment"), (1, "it reads MAILTO=ops")]
)
async def test_a_listed_line_that_holds_no_schedule_is_refused_nothing_to_remove(
    tmp_path, line, why
):
    body = "MAILTO=ops\n\n# a comment\n0 * * * * root /usr/bin/true keep\n"
    f = _cron_file(tmp_path, body)
    raw = body.split("\n")[line - 1]
    rep = await remove_schedule(
        HostLink(LOCAL),
        _cron_file_sched(f, raw, line),
        "cf-w",
        host_backup_dir=str(tmp_path / "hb"),
    )
    assert not rep.ok and rep.reason_code == "nothing-to-remove" and rep.result == "refused", rep
    assert (
        f"line {line} of {f} holds no schedule ({why}): nothing to remove; nothing was changed"
        in rep.message
    )
    assert f.read_text() == body and backups("local") == []
    assert audit_results() == ["started", "refused"]


async def test_a_stopped_loop_names_its_witness_none_of_its_processes_left(children):
    p = spawn_loop("while true; do sleep 0.2; done")
    children.append(p)
    s = loop_sched(p)
    rep = await remove_schedule(HostLink(LOCAL), s, s.id)
    assert rep.ok, rep
    assert (
        "re-read, /proc holds none of the" in rep.message
        and "(pid with its start time) it stopped" in rep.message
    )
    assert p.wait(timeout=10) == -signal.SIGTERM


@pytest.mark.parametrize(
    "witness",
    [None, {}, {"gone": True}, {"gone": True, "said": " "}, {"gone": False, "said": "still there"}],
)
async def test_removed_without_a_witness_is_not_taken_as_removed(tmp_path, monkeypatch, witness):
    """A helper that says it removed the entry but names nothing it re-read (a stand-in for the
    host's helper, run as the `local` host runs it): `no-witness`, a failure, never done."""
    from fleetdeck.backend.actions import schedules as actions

    applied = {
        "ok": True,
        "message": "removed line 1",
        **({} if witness is None else {"witness": witness}),
    }
    monkeypatch.setattr(
        actions,
        "REMOTE",
        (
            "import json, sys\nreq = json.load(sys.stdin)\n"
            f"ans = {{'ok': True, 'what': 'the file'}} if req['op'] == 'inspect' else {applied!r}\n"
            "print(json.dumps(ans))\n"
        ),
    )
    f = _cron_file(tmp_path, "37 * * * * root /bin/true\n")
    rep = await remove_schedule(
        HostLink(LOCAL), _cron_file_sched(f, "37 * * * * root /bin/true", 1), "cf-w"
    )
    assert not rep.ok and rep.reason_code == "no-witness" and rep.result == "failed", rep
    assert "named no witness (what it re-read and found gone): not taken as removed" in rep.message
    assert audit_results() == ["started", "failed"]


@pytest.mark.parametrize(
    ("inspected", "applied", "said"),
    [
        ({"ok": True}, None, "the answer has no what; nothing was changed"),
        (
            {"ok": True, "what": "the file", "sha256": 7},
            None,
            "sha256 is an integer, not a string; nothing was changed",
        ),
        (
            {"ok": True, "what": "the file"},
            {"ok": True, "message": "removed", "witness": "gone"},
            "witness is a string, not an object; the removal may or may not have happened",
        ),
    ],
)
async def test_an_answer_of_another_shape_is_a_bad_answer(
    tmp_path, monkeypatch, inspected, applied, said
):
    """A helper (a stand-in run as the `local` host runs it) whose answer lacks a declared
    field or holds one of another type: `bad-answer` naming the field, a failure, never done
    and never taken for an unreachable host."""
    from fleetdeck.backend.actions import schedules as actions

    monkeypatch.setattr(
        actions,
        "REMOTE",
        (
            "import json, sys\nreq = json.load(sys.stdin)\n"
            f"ans = {inspected!r} if req['op'] == 'inspect' else {applied!r}\n"
            "print(json.dumps(ans))\n"
        ),
    )
    f = _cron_file(tmp_path, "38 * * * * root /bin/true\n")
    rep = await remove_schedule(
        HostLink(LOCAL), _cron_file_sched(f, "38 * * * * root /bin/true", 1, "cf-b"), "cf-b"
    )
    assert not rep.ok and rep.reason_code == "bad-answer" and rep.result == "failed", rep
    assert "the schedules helper gave an answer the controller cannot read: " in rep.message
    assert said in rep.message, rep.message
