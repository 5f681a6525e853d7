"""Crontab edits are byte-exact: CR, Latin-1 and invalid UTF-8 survive; only the removed line changes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fleetdeck.backend.actions import audit

from support.cli import local_fleet, run_cli
from support.crontab import backups

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(shutil.which("crontab") is None, reason="cron's crontab is not installed"),
    pytest.mark.skipif(
        not Path("/var/spool/cron/crontabs").is_dir(), reason="no Debian cron spool"
    ),
]

# every line a different way to be "not plain UTF-8"; removal of any one must leave the others
LINES = [
    b"# caf\xe9: a Latin-1 comment",
    b"*/7 * * * * /usr/bin/true cr-line\r",
    b"5 4 * * * /usr/bin/printf 'caf\xe9' > /dev/null",
    b"6 4 * * * /usr/bin/true bad \xff\xfe utf8",
    b"7 4 * * * /usr/bin/true plain-keep",
    b"8 4 * * * /usr/bin/true tab\there\x0b vt",
]
CRONTAB = b"".join(x + b"\n" for x in LINES)


def read_crontab() -> bytes:
    """root's crontab as cron holds it: the spool file below the 3 header lines crontab writes
    (`crontab -l` is no witness: Debian's prints a CR as backslash-r)."""
    data = Path("/var/spool/cron/crontabs/root").read_bytes()
    head = data.split(b"\n", 3)
    assert head[0].startswith(b"# DO NOT EDIT") and head[2].startswith(b"# (Cron version"), head[:3]
    return head[3]


def install(data: bytes, tmp: Path) -> None:
    import subprocess

    f = tmp / "crontab.bytes"
    f.write_bytes(data)
    subprocess.run([shutil.which("crontab"), str(f)], check=True)


def listing(hosts: str, capsys, user: str = "root") -> list[dict]:
    """The crontab entries of `user` (other users on this machine have crontabs of their own)."""
    rc, out, err = run_cli(["--hosts", hosts, "schedules", "--json"], capsys)
    assert rc == 0, err
    return [s for s in json.loads(out)["schedules"] if s["kind"] == "crontab" and s["user"] == user]


def by_line(entries: list[dict], n: int) -> dict:
    (hit,) = [s for s in entries if s["line"] == n]
    return hit


@pytest.mark.parametrize("n", [2, 3, 4, 6])
def test_removing_one_line_changes_only_that_line(root_crontab, tmp_path, capsys, n):  # noqa: F811
    install(CRONTAB, tmp_path)
    assert read_crontab() == CRONTAB
    hosts = local_fleet(tmp_path)
    first = listing(hosts, capsys)
    # ids are stable across polls even for undecodable bytes
    assert [s["id"] for s in first] == [s["id"] for s in listing(hosts, capsys)]
    sid = by_line(first, n)["id"]
    rc, out, err = run_cli(
        ["--hosts", hosts, "schedules", "remove", "local", sid, "--confirm", sid, "--json"], capsys
    )
    assert rc == 0, err
    assert read_crontab() == b"".join(x + b"\n" for i, x in enumerate(LINES, 1) if i != n)
    rep = json.loads(out)
    assert Path(rep["backup"]).read_bytes() == CRONTAB
    assert Path(rep["host_backup"]).read_bytes() == CRONTAB
    assert [p.read_bytes() for p in backups("local")] == [CRONTAB]
    # the audit log holds the record, whatever bytes the line had
    assert [r["result"] for r in audit.read_audit() if r["action"] == "schedule-remove"] == [
        "started",
        "done",
    ]


def test_removing_a_line_leaves_another_users_crontab_alone(
    root_crontab,  # noqa: F811
    bystander,
    tmp_path,
    capsys,
):
    """Another user's crontab has a line 3 too: removing root's line 3 changes root's crontab
    only, and the other user's entries are listed with the same ids before and after."""
    if bystander is None:
        pytest.skip("needs root, useradd and the Debian cron spool for a second user's crontab")
    install(CRONTAB, tmp_path)
    hosts = local_fleet(tmp_path)

    def theirs() -> list[tuple]:
        # by line: the listing's order is the CLI's (stray first, ...), not the file's
        return sorted(
            (s["line"], s["raw"], s["id"]) for s in listing(hosts, capsys, bystander.name)
        )

    before = theirs()
    assert len(before) == 10 and before[0][:2] == (
        3,
        "1 3 * * * /usr/bin/true fleetdeck-bystander-1",
    ), before
    sid = by_line(listing(hosts, capsys), 3)["id"]
    rc, out, err = run_cli(
        ["--hosts", hosts, "schedules", "remove", "local", sid, "--confirm", sid, "--json"], capsys
    )
    assert rc == 0, err
    assert read_crontab() == b"".join(x + b"\n" for i, x in enumerate(LINES, 1) if i != 3)
    assert theirs() == before
    bystander.check()


def test_listing_shows_undecodable_bytes_escaped_and_never_crashes(
    root_crontab,  # noqa: F811
    tmp_path,
    capsys,
    monkeypatch,
):
    install(CRONTAB, tmp_path)
    hosts = local_fleet(tmp_path)
    monkeypatch.setenv("COLUMNS", "250")
    rc, out, err = run_cli(["--hosts", hosts, "schedules"], capsys)
    assert rc == 0, err
    assert "\\xff\\xfe" in out and "caf\\xe9" in out and "cr-line\\r" in out
    assert "Traceback" not in err


def test_cron_file_without_final_newline_keeps_every_other_byte(tmp_path):
    import asyncio
    import sys

    from fleetdeck.backend.actions.schedules import remove_schedule
    from fleetdeck.backend.fleet.config import HostConfig
    from fleetdeck.backend.fleet.link.ssh import HostLink
    from fleetdeck.backend.fleet.models import Schedule
    from fleetdeck.backend.host.lib.text import fsdec

    f = tmp_path / "cron.d-chain"
    body = (
        b"SHELL=/bin/sh\r\n0 * * * * root /usr/bin/true caf\xe9\n"
        b"37 * * * * root /bin/echo \xff check\n1 2 * * * root /usr/bin/true last-no-newline"
    )
    f.write_bytes(body)
    local = HostConfig(name="local", local=True, python=sys.executable, command_timeout=20)
    for n, raw, expect in (
        (
            3,
            b"37 * * * * root /bin/echo \xff check",
            b"SHELL=/bin/sh\r\n0 * * * * root /usr/bin/true caf\xe9\n1 2 * * * root /usr/bin/true last-no-newline",
        ),
        (
            3,
            b"1 2 * * * root /usr/bin/true last-no-newline",
            b"SHELL=/bin/sh\r\n0 * * * * root /usr/bin/true caf\xe9\n",
        ),
    ):
        sched = Schedule(
            id=f"cf-{n}",
            host="local",
            kind="cron-file",
            user="root",
            spec="x",
            command="x",
            source=str(f),
            raw=fsdec(raw),
            line=n,
        )
        rep = asyncio.run(
            remove_schedule(HostLink(local), sched, sched.id, host_backup_dir=str(tmp_path / "hb"))
        )
        assert rep.ok, rep
        assert f.read_bytes() == expect
        assert Path(rep.backup).read_bytes() == body
        body = expect


def test_crontab_l_is_no_witness_but_the_spool_is(root_crontab, tmp_path):  # noqa: F811
    # Debian's crontab -l prints CR as \r and BS as \b: the exact bytes come from the spool
    import subprocess

    from fleetdeck.backend.host.lib import crontab

    body = b"# top\n3 3 * * * /usr/bin/printf 'a\rb\x08c' # \\r and \\b typed literally\n"
    install(body, tmp_path)
    listed = subprocess.run([shutil.which("crontab"), "-l"], capture_output=True, check=True).stdout
    assert listed != body and listed == crontab.shown_by_crontab_l(body)
    assert crontab.read("root") == body
    assert crontab.read_checked("root") == (body, None)
