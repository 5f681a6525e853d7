"""The command line as a first-time user types it: options only as spelled (a `--host` typo is
never read as `--hosts`), an unknown option answered with the command's own usage, counts that
must be positive refused, `schedules list` as plain `schedules`, a host named twice listed once,
and one JSON document from `purge --json` even when the host cannot be reached."""

from __future__ import annotations

import json
import socket
import sys

import pytest

from fleetdeck.cli.main import main


def run(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        rc = main(list(argv))
    except SystemExit as e:  # argparse's own exits
        rc = int(e.code or 0)
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize(
    "argv",
    [
        ["audit", "--host", "local"],
        ["alerts", "--host", "local"],
        ["mirror", "local:/a", "local:/b", "--host", "local"],
    ],
)
def test_a_host_option_where_there_is_none_is_refused_not_read_as_the_fleet_file(
    capsys,
    fleet,  # noqa: F811
    argv,
):
    rc, out, err = run(capsys, "--hosts", str(fleet[0]), *argv)
    assert rc == 2 and out == ""
    assert "unrecognized arguments: --host local" in err
    assert f"usage: fleetdeck {argv[0]}" in err, "the command's own usage, not the top level's"
    assert "fleet file not found" not in err


def test_an_unknown_option_after_a_command_shows_that_commands_usage(capsys, fleet):  # noqa: F811
    rc, _, err = run(capsys, "--hosts", str(fleet[0]), "purge", "local", "/x", "--yes")
    assert rc == 2 and "usage: fleetdeck purge" in err and "unrecognized arguments: --yes" in err


@pytest.mark.parametrize("bad", ["0", "-3", "many"])
def test_audit_limit_must_be_a_whole_number_of_at_least_one(capsys, bad):
    rc, out, err = run(capsys, "audit", f"--limit={bad}")
    assert rc == 2 and out == "" and "not a whole number of at least 1" in err


def test_schedules_list_is_plain_schedules(capsys, fleet):  # noqa: F811
    rc1, out1, _ = run(capsys, "--hosts", str(fleet[0]), "schedules", "--json")
    rc2, out2, _ = run(capsys, "--hosts", str(fleet[0]), "schedules", "list", "--json")
    assert rc1 == rc2
    # the two polls see the same cron entries and timers; shell loops on this live machine
    # (any shell with a sleep child) may come and go between them
    ids = [
        sorted(s["id"] for s in json.loads(o)["schedules"] if s["kind"] != "loop")
        for o in (out1, out2)
    ]
    assert ids[0] == ids[1] and ids[0], "the machine's own cron files are listed both ways"


def test_a_host_named_twice_is_polled_and_listed_once(capsys, fleet):  # noqa: F811
    rc, out, _ = run(
        capsys, "--hosts", str(fleet[0]), "status", "--host", "local", "--host", "local", "--json"
    )
    assert rc == 0 and [h["name"] for h in json.loads(out)["hosts"]] == ["local"]


def test_purge_json_is_one_document_when_the_host_cannot_be_reached(capsys, tmp_path):
    with socket.socket() as s:  # a port nobody listens on: connection refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    f = tmp_path / "hosts.toml"
    f.write_text(f'[hosts.gone]\naddress = "127.0.0.1"\nport = {port}\nconnect_timeout = 3\n')
    rc, out, err = run(capsys, "--hosts", str(f), "purge", "gone", "/tmp/x", "--json")
    doc = json.loads(out)
    assert rc == 1 and doc["ok"] is False and doc["deleted"] is False and doc["host"] == "gone"
    assert doc["reason"] and "refused" in doc["error"] and "purge on gone failed" in err


@pytest.mark.parametrize(
    "argv",
    [["watch", "--count", "0"], ["watch", "--interval", "-5"], ["watch", "--interval", "nan"]],
)
def test_watch_counts_and_intervals_must_be_positive(capsys, argv):
    rc, out, err = run(capsys, *argv)
    assert rc == 2 and out == "" and ("at least 1" in err or "above 0" in err)


def test_a_missing_key_file_is_not_called_a_refused_login(capsys, tmp_path):
    f = tmp_path / "hosts.toml"
    f.write_text(
        f'[hosts.alpha]\naddress = "127.0.0.1"\nport = 9\nclient_keys = ["{tmp_path}/nokey"]\n'
    )
    rc, out, err = run(capsys, "--hosts", str(f), "status")
    assert rc == 1
    assert f"alpha cannot be logged into: key file {tmp_path}/nokey does not exist" in err
    assert "refused our login" not in err


def test_version(capsys):
    from importlib.metadata import version

    rc, out, _ = run(capsys, "--version")
    assert rc == 0 and out.strip() == f"fleetdeck {version('fleetdeck')}"


def test_a_mirror_to_a_host_that_cannot_be_reached_says_nothing_was_copied(capsys, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    src = tmp_path / "src"
    src.mkdir()
    (src / "adapter_model.safetensors").write_bytes(b"x" * 4096)
    f = tmp_path / "hosts.toml"
    f.write_text(
        f'[hosts.here]\nlocal = true\npython = "{sys.executable}"\n'
        f'[hosts.gone]\naddress = "127.0.0.1"\nport = {port}\nconnect_timeout = 3\n'
    )
    rc, out, _ = run(capsys, "--hosts", str(f), "mirror", f"here:{src}", "gone:/tmp/x")
    assert rc == 1 and "failed before any byte was copied" in out and "0B of 0B" not in out


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["status"], "status"),
        (["--hosts", "status", "runs", "--json"], "runs"),  # a fleet file named `status`
        (["--hosts=f.toml", "mirror", "a:x", "b:y"], "mirror"),
        ([], "tui"),
        (["--hosts", "f.toml"], "tui"),
        (["--help"], None),
        (["--version"], None),
        (["--", "status"], None),
        (["statsu"], "statsu"),
    ],
)
def test_the_command_a_line_names(argv, named):
    from fleetdeck.cli.main import named_command

    assert named_command(argv) == named


def test_a_command_imports_its_own_module_only_and_help_lists_them_all():
    """`fleetdeck status` builds a parser of its module alone (SSH and the poller, not the
    monitor, the dashboard or MCP); `--help` and a mistyped command still see every command."""
    import subprocess

    code = (
        "import sys\nfrom fleetdeck.cli.main import main\n"
        "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('fleetdeck.cli.')), file=sys.stderr)\n"
    )

    def loaded(*argv: str) -> tuple[str, set[str]]:
        p = subprocess.run(
            [sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120
        )
        return p.stdout, set(eval(p.stderr.strip().splitlines()[-1]))  # noqa: S307 - our list

    out, mods = loaded("status", "--help")
    assert "--json" in out
    assert "fleetdeck.cli.status" in mods
    assert not {"fleetdeck.cli.watch", "fleetdeck.cli.mcp", "fleetdeck.cli.dashboard"} & mods
    out, mods = loaded("--help")
    assert "watch" in out and "holders" in out
    assert {"fleetdeck.cli.watch", "fleetdeck.cli.mcp", "fleetdeck.cli.status"} <= mods
    _, mods = loaded("statsu")
    assert "fleetdeck.cli.watch" in mods  # every command registered, so argparse names them
