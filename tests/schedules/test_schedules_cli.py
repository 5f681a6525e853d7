"""`fleetdeck schedules`, `schedules ack`, `schedules remove` over a real crontab and real hosts."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fleetdeck.backend.actions import audit
from fleetdeck.backend.fleet import acks

from support.cli import local_fleet, run_cli
from support.crontab import install_crontab, read_crontab
from support.sshfleet import free_port

pytestmark = pytest.mark.skipif(
    shutil.which("crontab") is None, reason="cron's crontab is not installed"
)

LINE = "17 3 * * * /usr/bin/true chain-check-7f3 \"a b\" '$(touch /tmp/fleetdeck-pwned)' -x"
OTHER = "*/10 * * * * /usr/bin/true keep-me"


def listed(out: str, raw: str = LINE) -> dict:
    doc = json.loads(out)
    hits = [s for s in doc["schedules"] if s.get("raw") == raw]
    assert len(hits) == 1, doc["schedules"]
    return hits[0]


@pytest.fixture
def crontab(root_crontab, tmp_path):  # noqa: F811
    install_crontab(f"# chain\n{OTHER}\n{LINE}\n", tmp_path)


@pytest.mark.root
def test_listing_ack_persists_and_clears_unacknowledged(crontab, tmp_path, capsys, monkeypatch):
    hosts = local_fleet(tmp_path)
    rc, out, err = run_cli(["--hosts", hosts, "schedules", "--json"], capsys)
    assert rc == 0, err
    s = listed(out)
    assert (s["host"], s["kind"], s["line"], s["spec"]) == ("local", "crontab", 3, "17 3 * * *")
    assert s["command"] == LINE.split(None, 5)[5]
    assert s["stray"] and "unacknowledged" in s["reasons"]
    for key in (
        "id",
        "host",
        "kind",
        "user",
        "spec",
        "command",
        "source",
        "next_run",
        "pid",
        "stray",
        "reasons",
    ):
        assert key in s

    rc, out, err = run_cli(["--hosts", hosts, "schedules", "ack", s["id"]], capsys)
    assert rc == 0, err
    assert acks.load_acks().covers("local", s["id"])
    # a separate invocation reads the acknowledgement back from the state dir
    rc, out, _ = run_cli(["--hosts", hosts, "schedules", "--json"], capsys)
    again = listed(out)
    assert again["id"] == s["id"] and "unacknowledged" not in again["reasons"]
    other = listed(out, OTHER)
    assert "unacknowledged" in other["reasons"]
    assert [(r["action"], r["result"]) for r in audit.read_audit()] == [("schedule-ack", "done")]

    monkeypatch.setenv("COLUMNS", "250")
    rc, out, _ = run_cli(["--hosts", hosts, "schedules"], capsys)
    assert rc == 0 and s["id"] in out and other["id"] in out and "STRAY" in out


@pytest.mark.root
def test_ack_of_an_unknown_id_is_refused_and_nothing_stored(crontab, tmp_path, capsys):
    hosts = local_fleet(tmp_path)
    rc, out, _ = run_cli(["--hosts", hosts, "schedules", "--json"], capsys)
    known = listed(out)["id"]
    rc, out, err = run_cli(
        ["--hosts", hosts, "schedules", "ack", known, "--", "-no-such $(id)"], capsys
    )
    assert rc == 1
    assert "-no-such $(id)" in err and "nothing was acknowledged" in err and "Traceback" not in err
    assert acks.load_acks() == acks.Acks()
    assert audit.read_audit()[-1]["result"] == "refused"


@pytest.mark.root
def test_unreachable_host_is_named_and_the_others_still_listed(crontab, tmp_path, capsys):
    port = free_port()  # nothing listens there
    hosts = local_fleet(tmp_path, f'[hosts.down]\naddress = "127.0.0.1"\nport = {port}\n')
    rc, out, err = run_cli(["--hosts", hosts, "schedules", "--json"], capsys)
    assert rc == 1
    assert listed(out)["host"] == "local"
    assert [u["host"] for u in json.loads(out)["unreachable"]] == ["down"]
    assert "down" in err and "unreachable" in err and "Traceback" not in err
    rc, out, err = run_cli(["--hosts", hosts, "schedules", "--host", "local", "--json"], capsys)
    assert rc == 0 and listed(out)
    rc, _, err = run_cli(["--hosts", hosts, "schedules", "--host", "nosuch"], capsys)
    assert rc == 2 and "nosuch" in err


@pytest.mark.root
def test_remove_needs_the_id_typed_back_then_removes_one_line(crontab, tmp_path, capsys):
    hosts = local_fleet(tmp_path)
    rc, out, _ = run_cli(["--hosts", hosts, "schedules", "--json"], capsys)
    sid = listed(out)["id"]
    before = read_crontab()

    rc, _, err = run_cli(["--hosts", hosts, "schedules", "remove", "local", sid], capsys)
    assert (
        rc == 1 and "not-confirmed" in err and read_crontab() == before
    )  # stdin is not a terminal
    rc, _, err = run_cli(
        ["--hosts", hosts, "schedules", "remove", "local", sid, "--confirm", sid[:-1]], capsys
    )
    assert rc == 1 and "not-confirmed" in err and read_crontab() == before
    rc, _, err = run_cli(
        ["--hosts", hosts, "schedules", "remove", "local", "deadbeef", "--confirm", "deadbeef"],
        capsys,
    )
    assert rc == 1 and "not-found" in err and read_crontab() == before

    rc, out, err = run_cli(
        ["--hosts", hosts, "schedules", "remove", "local", sid, "--confirm", sid, "--json"], capsys
    )
    assert rc == 0, err
    rep = json.loads(out)
    assert rep["removed"] and rep["result"] == "done" and Path(rep["backup"]).read_bytes() == before
    assert read_crontab() == f"# chain\n{OTHER}\n".encode()
    assert [r["result"] for r in audit.read_audit()] == [
        "refused",
        "refused",
        "refused",
        "started",
        "done",
    ]
    assert not Path("/tmp/fleetdeck-pwned").exists()


@pytest.mark.sshd
@pytest.mark.root
def test_listing_over_ssh(crontab, sshd_fleet, tmp_path, capsys):
    hosts = str(sshd_fleet.write_fleet(tmp_path / "hosts.toml", names=["h1", "h2"]))
    rc, out, err = run_cli(["--hosts", hosts, "schedules", "--host", "h2", "--json"], capsys)
    assert rc == 0, err
    s = listed(out)
    assert s["host"] == "h2"


@pytest.mark.sshd
def test_loop_listed_and_stopped_over_ssh(sshd_fleet, tmp_path, capsys):
    import subprocess

    hosts = str(sshd_fleet.write_fleet(tmp_path / "hosts.toml", names=["h1"]))
    p = subprocess.Popen(
        ["bash", "-c", "trap '' TERM; while true; do sleep 0.2; done # check-on-run"],
        start_new_session=True,
    )
    try:
        rc, out, err = run_cli(["--hosts", hosts, "schedules", "--host", "h1", "--json"], capsys)
        assert rc == 0, err
        (s,) = [
            s for s in json.loads(out)["schedules"] if s["kind"] == "loop" and s["pid"] == p.pid
        ]
        assert s["start_time"] and "check-on-run" in s["command"]
        rc, out, err = run_cli(
            [
                "--hosts",
                hosts,
                "schedules",
                "remove",
                "h1",
                s["id"],
                "--confirm",
                s["id"],
                "--grace",
                "0.3",
                "--json",
            ],
            capsys,
        )
        assert rc == 0, err
        assert json.loads(out)["signals"] == ["SIGTERM", "SIGKILL"]
        assert p.wait(timeout=10) == -9
        # the same id again: the process is gone, so it is no longer listed
        rc, _, err = run_cli(
            ["--hosts", hosts, "schedules", "remove", "h1", s["id"], "--confirm", s["id"]], capsys
        )
        assert rc == 1 and "not-found" in err
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_hostile_ids_are_escaped_once_and_never_reach_the_terminal_raw(tmp_path, capsys):
    hosts = local_fleet(tmp_path)
    sid = "c-\x1b[2J\\n\udcff"  # an escape sequence, a literal backslash-n, an undecodable byte
    rc, _, err = run_cli(
        ["--hosts", hosts, "schedules", "remove", "local", sid, "--confirm", sid], capsys
    )
    assert rc == 1 and "\x1b" not in err and "Traceback" not in err
    assert (
        err.count("c-\\x1b[2J\\\\n\\xff") == 2
    )  # in the verb line and in the reason, escaped once
    rc, _, err = run_cli(["--hosts", hosts, "schedules", "ack", sid], capsys)
    assert rc == 1 and "\x1b" not in err and "c-\\x1b[2J\\\\n\\xff" in err
    assert all("\x1b" not in json.dumps(r, ensure_ascii=False) for r in audit.read_audit())


@pytest.mark.parametrize("grace", ["nan", "inf", "-1", "1e9", "soon"])
def test_grace_must_be_finite_seconds(tmp_path, capsys, grace):
    hosts = local_fleet(tmp_path)
    with pytest.raises(SystemExit) as e:
        run_cli(
            [
                "--hosts",
                hosts,
                "schedules",
                "remove",
                "local",
                "l-1",
                "--confirm",
                "l-1",
                "--grace",
                grace,
            ],
            capsys,
        )
    assert e.value.code == 2 and "--grace" in capsys.readouterr().err


def test_the_table_never_folds_an_id_at_80_columns():
    """An id is what `schedules remove` and `--ack` take: at 80 columns (a pipe's default) the free
    text folds, the id stays whole on its line."""
    import io

    from rich.cells import cell_len
    from rich.console import Console

    from fleetdeck.backend.fleet.models import Schedule
    from fleetdeck.cli.schedules import schedules_table

    rows = [
        Schedule(
            id=f"t-{name}.timer",
            host="gpu-box-with-a-long-name",
            kind="timer",
            user="root",
            spec="OnCalendar=*-*-* 03:00:00",
            command="/usr/bin/python3 /opt/jobs/nightly_eval.py --all --upload",
            source="systemd",
            reasons=("no-owner",),
            stray=True,
        )
        for name in ("nightly-eval-of-every-adapter", "cleanup", "夜間評価-of-every-adapter")
    ]
    for width in (80, 40):  # 40: the id's column keeps its full width even then
        buf = io.StringIO()
        Console(file=buf, width=width, soft_wrap=False, color_system=None).print(
            schedules_table(rows, width=width)
        )
        text = buf.getvalue()
        assert max(cell_len(line) for line in text.splitlines()) <= width
        for s in rows:
            assert any(s.id in line for line in text.splitlines()), (width, s.id)
        if width == 80:  # a record per schedule: the command reads whole, not in 4-cell shreds
            assert any(
                "/usr/bin/python3 /opt/jobs/nightly_eval.py --all --upload" in line
                for line in text.splitlines()
            ), text
    wide = io.StringIO()
    Console(file=wide, width=160, soft_wrap=False, color_system=None).print(
        schedules_table(rows, width=160)
    )
    assert "┃ host" in wide.getvalue() or " host " in wide.getvalue().splitlines()[1], (
        wide.getvalue()
    )


def test_every_listing_names_an_unreachable_host_the_same_way(tmp_path, capsys):
    """`runs`, `schedules` and `seats` list a host they could not ask with the same keys."""
    port = free_port()  # nothing listens there
    hosts = local_fleet(tmp_path, f'[hosts.down]\naddress = "127.0.0.1"\nport = {port}\n')
    for cmd, code in (
        ("runs", 1),
        ("schedules", 1),
        ("seats", 1),
    ):  # every listing: 1 (CONTRACT.md)
        rc, out, err = run_cli(["--hosts", hosts, cmd, "--json"], capsys)
        down = json.loads(out)["unreachable"]
        assert rc == code, (cmd, err)
        assert [sorted(u) for u in down] == [["error", "error_code", "host", "name"]], (cmd, down)
        assert (
            down[0]["name"] == down[0]["host"] == "down" and down[0]["error_code"] == "unreachable"
        ), cmd
        assert "refused" in down[0]["error"], cmd


def test_the_cli_and_the_dashboard_acknowledge_through_one_action_with_one_record(tmp_path):
    """`schedules ack` and the Schedules view's `a` are `schedule_ack.acknowledge`: the same
    ids stored, the same record's shape, only `via` telling them apart."""
    from fleetdeck.backend.actions import audit, schedule_ack
    from fleetdeck.backend.fleet import acks

    schedule_ack.acknowledge(on_host=[("h1", "c-" + "1" * 32)], via="cli")
    schedule_ack.acknowledge(on_host=[("h2", "c-" + "2" * 32)], via="dashboard")
    schedule_ack.acknowledge(everywhere=["c-" + "3" * 32], via="cli")
    cli, view, every = [r for r in audit.read_audit() if r["action"] == "schedule-ack"]
    keys = {k for k in cli if k not in ("ts", "seq", "user", "controller", "pid")}
    assert keys == {k for k in view if k not in ("ts", "seq", "user", "controller", "pid")}
    assert cli["hosts"] == {"c-" + "1" * 32: ["h1"]} and cli["via"] == "cli"
    assert view["hosts"] == {"c-" + "2" * 32: ["h2"]} and view["via"] == "dashboard"
    assert every["host"] == "*" and every["all_hosts"] is True
    stored = acks.load_acks()
    assert ("h1", "c-" + "1" * 32) in stored.on_host and "c-" + "3" * 32 in stored.everywhere
