"""The distribution's own cron entries are `system`, never stray; one user's broken crontab never
hides the others."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from fleetdeck.backend.host.lib import packages
from fleetdeck.backend.host.probe.common import Procs
from fleetdeck.backend.host.probe.schedules import schedules

from support.cli import local_fleet, run_cli
from support.crontab import install_crontab

SPOOL = Path("/var/spool/cron/crontabs")


def listed(hosts: str, capsys) -> list[dict]:
    rc, out, err = run_cli(["--hosts", hosts, "schedules", "--json"], capsys)
    assert rc == 0, err
    return json.loads(out)["schedules"]


@pytest.mark.skipif(
    packages.installed_by("/etc/crontab") is None,
    reason="/etc/crontab is not a package's unmodified file here",
)
def test_stock_distribution_entries_are_system_and_never_stray(tmp_path, capsys):
    every = listed(local_fleet(tmp_path), capsys)
    stock = [s for s in every if s["source"] == "/etc/crontab"]
    assert stock and any("run-parts" in s["command"] for s in stock)
    for s in stock:
        assert s["system"] is True and s["stray"] is False and s["reasons"] == []
        assert s["why"] == "installed by the distribution"
    # nothing that needs a look is sorted below them
    ranks = [s["system"] for s in every]
    assert ranks == sorted(ranks)
    if packages.installed_by("/etc/cron.d/e2scrub_all"):
        e2 = [s for s in every if s["source"] == "/etc/cron.d/e2scrub_all"]
        assert e2 and all(s["system"] and not s["stray"] for s in e2)


@pytest.mark.root
def test_a_cron_file_written_by_hand_is_not_the_distributions(tmp_path, capsys):
    if not os.access("/etc/cron.d", os.W_OK):
        pytest.skip("/etc/cron.d is not writable here")
    f = Path("/etc/cron.d") / f"fleetdeck-system-test-{os.getpid()}"
    try:
        f.write_text("0 0 31 2 * root /usr/bin/true hand-written\n")
        (s,) = [s for s in listed(local_fleet(tmp_path), capsys) if s["source"] == str(f)]
    finally:
        f.unlink(missing_ok=True)
    assert s["system"] is False and s["stray"] and "unacknowledged" in s["reasons"]


@pytest.mark.root
@pytest.mark.skipif(
    shutil.which("crontab") is None or not SPOOL.is_dir(), reason="no Debian cron spool here"
)
def test_orphaned_crontab_is_a_warning_on_that_user_only(root_crontab, tmp_path):  # noqa: F811
    line = "13 1 * * * /usr/bin/true still-listed-9d2"
    install_crontab(line + "\n", tmp_path)
    ghost = SPOOL / f"fdghost{uuid.uuid4().hex[:8]}"  # a spool file whose user was deleted
    try:
        ghost.write_bytes(b"1 1 * * * /usr/bin/true ghost\n")
        os.chmod(ghost, 0o600)
        warnings: list[str] = []
        got = schedules({"fresh": True}, Procs(), warnings)
    finally:
        ghost.unlink(missing_ok=True)
    assert [s["raw"] for s in got if s["kind"] == "crontab" and s["user"] == "root"] == [line]
    (w,) = [w for w in warnings if ghost.name in w]
    assert "belongs to no user" in w
    assert not [w for w in warnings if "root" in w]
    assert not any(s["kind"] == "crontab" and s["user"] == ghost.name for s in got)


@pytest.mark.root
@pytest.mark.skipif(
    shutil.which("useradd") is None or shutil.which("crontab") is None, reason="no useradd/crontab"
)
def test_another_users_crontab_is_listed_as_theirs(root_crontab, tmp_path):  # noqa: F811
    name = f"fdt{uuid.uuid4().hex[:8]}"
    subprocess.run(["useradd", "--no-create-home", name], check=True)
    try:
        tab = tmp_path / "tab"
        tab.write_bytes(b"2 2 * * * /usr/bin/true theirs-\xe9\r\n")
        subprocess.run(["crontab", "-u", name, str(tab)], check=True)
        got = schedules({"fresh": True}, Procs(), [])
        (s,) = [s for s in got if s["kind"] == "crontab" and s["user"] == name]
        assert os.fsencode(s["raw"]) == b"2 2 * * * /usr/bin/true theirs-\xe9\r"
        assert s["command"].endswith("\r")  # what cron runs, carriage return included
    finally:
        subprocess.run(["crontab", "-u", name, "-r"], capture_output=True)
        subprocess.run(["userdel", name], check=True)
