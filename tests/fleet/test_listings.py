"""The listings as a script reads them: every listing exits 1 when a host is unreachable,
`--filter TEXT` narrows each to the rows that show TEXT, `schedules --stray-only` and the
distribution's entries folded unless `--all` (real sshd hosts, the real CLI)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.sshd


def _cli(fleet_path, *args):
    return subprocess.run(
        [sys.executable, "-m", "fleetdeck.cli.main", "--hosts", str(fleet_path), *args],
        capture_output=True,
        text=True,
        timeout=180,
    )


@pytest.fixture
def two_hosts(spare_fleet, tmp_path):
    a = spare_fleet.add("la")
    spare_fleet.add("lb")
    for name, loss in (("run-alpha", 2.5), ("run-beta", 1.5)):
        d = a.runs / name
        d.mkdir()
        (d / "progress.jsonl").write_text(
            json.dumps({"step": 3, "loss": loss, "max_steps": 10}) + "\n"
        )
    return spare_fleet, spare_fleet.write_fleet(tmp_path / "hosts.toml")


def test_every_listing_exits_1_when_a_host_is_unreachable(two_hosts):
    fleet, path = two_hosts
    for args in (["status"], ["runs"], ["schedules"], ["seats"]):
        ok = _cli(path, *args, "--json")
        assert ok.returncode == 0, (args, ok.stderr)
    fleet.kill("lb")
    for args in (["status"], ["runs"], ["schedules"], ["seats"]):
        for fmt in ([], ["--json"]):
            r = _cli(path, *args, *fmt)
            assert r.returncode == 1, (args, fmt, r.returncode, r.stderr)
            assert "lb" in r.stderr and "Traceback" not in r.stderr


def test_filter_narrows_runs_and_status_to_the_rows_that_show_the_text(two_hosts):
    _, path = two_hosts
    r = _cli(path, "runs", "--json", "--filter", "ALPHA")
    assert r.returncode == 0, r.stderr
    assert [x["name"] for x in json.loads(r.stdout)["runs"]] == ["run-alpha"]
    r = _cli(path, "runs", "--filter", "alpha")
    assert "run-alpha" in r.stdout and "run-beta" not in r.stdout
    r = _cli(path, "runs", "--filter", "no-such-run")
    assert r.returncode == 0 and "no run's row shows 'no-such-run'" in r.stdout
    r = _cli(path, "status", "--json", "--filter", "lb")
    assert [h["name"] for h in json.loads(r.stdout)["hosts"]] == ["lb"]


@pytest.mark.root
def test_schedules_filter_stray_only_and_the_distributions_entries_folded(two_hosts, bystander):
    """A throwaway user's crontab (unacknowledged, so stray) is what the filters are checked on:
    other entries on this machine may come and go while the suite runs."""
    if bystander is None:
        pytest.fail(
            "needs root, useradd and a Debian cron spool (the README's test command installs them)"
        )
    _, path = two_hosts
    full = json.loads(_cli(path, "schedules", "--json").stdout)["schedules"]
    mine = [s for s in full if s["user"] == bystander.name]
    assert mine and all(s["stray"] for s in mine)
    stray = json.loads(_cli(path, "schedules", "--json", "--stray-only").stdout)["schedules"]
    assert stray and all(s["stray"] for s in stray)
    assert {(s["host"], s["id"]) for s in mine} <= {(s["host"], s["id"]) for s in stray}
    # --filter: the user's name, in any case, finds exactly that user's entries
    got = json.loads(_cli(path, "schedules", "--json", "--filter", bystander.name.upper()).stdout)[
        "schedules"
    ]
    assert sorted((s["host"], s["id"]) for s in got) == sorted((s["host"], s["id"]) for s in mine)
    one = mine[0]
    got = json.loads(_cli(path, "schedules", "--json", "--filter", one["id"]).stdout)["schedules"]
    assert {s["id"] for s in got} == {one["id"]}
    system = [s for s in full if s["system"]]
    table = _cli(path, "schedules").stdout
    every = _cli(path, "schedules", "--all").stdout
    if system:
        # one line per host says how many were folded; --all lists them
        assert "the distribution installed, folded (--all lists them)" in table
        assert "folded" not in every
    else:
        assert "folded" not in table
    bystander.check()


def test_seats_with_nothing_found_say_so_in_a_sentence(two_hosts):
    _, path = two_hosts
    r = _cli(path, "seats", "--host", "la", "--filter", "no-such-model-anywhere")
    assert r.returncode == 0, r.stderr
    assert "no serving seat shows 'no-such-model-anywhere'" in r.stdout
