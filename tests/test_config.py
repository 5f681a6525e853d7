"""The fleet file: resolution order and every validation rule, through the real CLI too."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fleetdeck.backend.fleet.config import (
    BUILTIN_FLEET,
    ConfigError,
    find_fleet_file,
    load_fleet,
    parse_fleet,
)

GOOD = """
[defaults]
poll_interval = 2
known_hosts = "/tmp/kh"

[hosts.gx10]
address = "pfi-gx10"
user = "infra-ops"
runs = ["~/runs", "/tank/erp-tune"]
purge_roots = ["~/runs"]

[hosts.local]
local = true
"""


def test_good_file_applies_defaults_per_host():
    fleet = parse_fleet(GOOD, "f.toml")
    gx = fleet.host("gx10")
    assert gx.poll_interval == 2.0 and gx.known_hosts == "/tmp/kh"
    assert gx.runs == ("~/runs", "/tank/erp-tune") and gx.roots_for_purge == ("~/runs",)
    local = fleet.host("local")
    assert local.local and local.roots_for_purge == local.runs


@pytest.mark.parametrize(
    "text, needle",
    [
        ("[hosts.a\naddress='x'", "not valid TOML"),
        ("[hosts.a]\naddress='x'\nfoo=1\n", "host 'a': unknown key 'foo'"),
        ("[defaults]\nbogus=1\n[hosts.a]\naddress='x'\n", "[defaults]: unknown key 'bogus'"),
        ("[defaults]\naddress='x'\n[hosts.a]\naddress='x'\n", "[defaults]: unknown key 'address'"),
        ("[hosts.a]\naddress=3\n", "host 'a': key 'address' must be a string"),
        ("[hosts.a]\naddress='x'\nport='22'\n", "key 'port' must be an integer"),
        ("[hosts.a]\naddress='x'\nport=true\n", "key 'port' must be an integer"),
        ("[hosts.a]\naddress='x'\nport=70000\n", "key 'port' must be between"),
        ("[hosts.a]\naddress='x'\nruns='~/runs'\n", "key 'runs' must be a list of strings"),
        ("[hosts.a]\naddress='x'\nruns=[1]\n", "key 'runs' must be a list of strings"),
        ("[hosts.a]\naddress='x'\npoll_interval=0\n", "key 'poll_interval' must be greater than 0"),
        ("[hosts.a]\naddress='x'\naccept_new_host_keys='yes'\n", "must be true or false"),
        ("[hosts.a]\nuser='x'\n", "host 'a': missing key 'address'"),
        ("[hosts.a]\nlocal=true\naddress='x'\n", "cannot be combined"),
        ('[hosts."a b"]\naddress="x"\n', "host 'a b': a host name may only hold"),
        ("[hosts]\n", "no hosts"),
        ("[other]\n", "unknown top-level key 'other'"),
    ],
)
def test_each_validation_rule_names_file_host_and_key(text, needle):
    with pytest.raises(ConfigError) as e:
        parse_fleet(text, "/etc/fd/hosts.toml")
    assert str(e.value).startswith("/etc/fd/hosts.toml: ")
    assert needle in str(e.value)


def test_resolution_order(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert find_fleet_file(None, env={}) is None or not (tmp_path / "hosts.toml").exists()
    cfg = tmp_path / "cfg" / "fleetdeck"
    cfg.mkdir(parents=True)
    (cfg / "hosts.toml").write_text(GOOD)
    env = {"XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    assert find_fleet_file(None, env) == cfg / "hosts.toml"
    (tmp_path / "hosts.toml").write_text(GOOD)
    assert str(find_fleet_file(None, env)) == "hosts.toml"
    env["FLEETDECK_HOSTS"] = "/x/env.toml"
    assert str(find_fleet_file(None, env)) == "/x/env.toml"
    assert str(find_fleet_file("/x/arg.toml", env)) == "/x/arg.toml"


def test_no_file_means_builtin_local_fleet(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fleet = load_fleet(None)
    assert fleet is BUILTIN_FLEET
    assert [h.name for h in fleet.hosts] == ["local"] and fleet.hosts[0].local


def test_repository_hosts_toml_is_the_working_default():
    from pathlib import Path

    repo = Path(__file__).resolve().parent.parent / "hosts.toml"
    fleet = load_fleet(str(repo))
    assert [h.name for h in fleet.hosts] == ["local"]
    assert fleet.hosts[0].local
    text = repo.read_text()
    assert "# [hosts.gx10]" in text and "# [hosts.ana-ml2]" in text


@pytest.mark.parametrize("cmd", ["status", "runs", "schedules"])
def test_cli_exits_2_naming_file_host_key(tmp_path, cmd):
    bad = tmp_path / "hosts.toml"
    bad.write_text("[hosts.gx10]\naddress='x'\nprot=22\n")
    p = subprocess.run([sys.executable, "-m", "fleetdeck.cli.main", cmd, "--hosts", str(bad)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stderr
    assert str(bad) in p.stderr and "gx10" in p.stderr and "'prot'" in p.stderr
    assert "Traceback" not in p.stderr


def test_cli_missing_fleet_file_exits_2(tmp_path):
    p = subprocess.run([sys.executable, "-m", "fleetdeck.cli.main", "--hosts", str(tmp_path / "nope.toml"),
                        "status"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "not found" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.parametrize("key", ["poll_interval", "connect_timeout", "command_timeout"])
@pytest.mark.parametrize("value", ["inf", "nan", "+inf", "-nan"])
def test_non_finite_numbers_are_refused_naming_the_key(key, value):
    with pytest.raises(ConfigError) as e:
        parse_fleet(f"[defaults]\n{key} = {value}\n[hosts.a]\naddress = 'x'\n", "f.toml")
    shown = value.lstrip("+-")
    assert f"[defaults]: {key} = {shown} is not a finite number" in str(e.value)
    with pytest.raises(ConfigError) as e:
        parse_fleet(f"[hosts.a]\naddress = 'x'\n{key} = {value}\n", "f.toml")
    assert str(e.value) == f"f.toml: host 'a': {key} = {shown} is not a finite number"


def test_cli_exits_2_on_an_infinite_timeout(tmp_path):
    bad = tmp_path / "hosts.toml"
    bad.write_text("[hosts.a]\naddress = 'x'\ncommand_timeout = inf\n")
    p = subprocess.run([sys.executable, "-m", "fleetdeck.cli.main", "status", "--hosts", str(bad)],
                       capture_output=True, text=True)
    assert p.returncode == 2
    assert f"{bad}: host 'a': command_timeout = inf is not a finite number" in p.stderr


@pytest.mark.parametrize("line, said", [
    ("poll_interval = 1e400", "poll_interval = inf is not a finite number"),   # TOML reads 1e400 as inf
    ("connect_timeout = -inf", "connect_timeout = -inf is not a finite number"),
    ("poll_interval = -1", "poll_interval = -1 is out of range: key 'poll_interval' must be greater than 0"),
    ("command_timeout = 1e9", "command_timeout = 1000000000.0 is out of range: key 'command_timeout' must be "
                              "greater than 0 and at most 604800"),
    ("port = 0", "port = 0 is out of range: key 'port' must be between 1 and 65535"),
    ("port = 99999999999999999999999", "port = (an integer of 23 digits) is out of range"),
    ("port = 22.0", "key 'port' must be an integer, not 22.0"),
    ("port = true", "key 'port' must be an integer, not true"),
    ("poll_interval = false", "key 'poll_interval' must be a number, not false"),
    ("poll_interval = '5'", "key 'poll_interval' must be a number, not '5'"),
])
def test_fleet_numbers_are_finite_and_in_range_naming_key_and_value(line, said):
    with pytest.raises(ConfigError) as e:
        parse_fleet(f"[hosts.a]\naddress = 'x'\n{line}\n", "f.toml")
    assert str(e.value).startswith(f"f.toml: host 'a': {said}")


def test_fleet_numbers_at_the_edges_of_their_ranges_are_taken():
    fleet = parse_fleet("[defaults]\ncommand_timeout = 604800\n[hosts.a]\naddress = 'x'\nport = 65535\n"
                        "poll_interval = 0.25\n", "f.toml")
    (h,) = fleet.hosts
    assert (h.port, h.poll_interval, h.command_timeout) == (65535, 0.25, 604800.0)


def test_cli_exits_2_on_an_integer_too_long_to_read(tmp_path):
    bad = tmp_path / "hosts.toml"
    bad.write_text("[hosts.a]\naddress = 'x'\nport = " + "9" * 5000 + "\n")
    p = subprocess.run([sys.executable, "-m", "fleetdeck.cli.main", "status", "--hosts", str(bad)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and f"{bad}: not valid TOML" in p.stderr and "Traceback" not in p.stderr
