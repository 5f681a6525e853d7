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
        (
            "[hosts.a]\naddress='x'\npoll_interval=0\n",
            "key 'poll_interval' must be between 0.1 and 3600",
        ),
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

    repo = Path(__file__).resolve().parents[2] / "hosts.toml"
    fleet = load_fleet(str(repo))
    assert [h.name for h in fleet.hosts] == ["local"]
    assert fleet.hosts[0].local
    text = repo.read_text()
    assert "# [hosts.gx10]" in text and "# [hosts.ana-ml2]" in text


@pytest.mark.parametrize("cmd", ["status", "runs", "schedules"])
def test_cli_exits_2_naming_file_host_key(tmp_path, cmd):
    bad = tmp_path / "hosts.toml"
    bad.write_text("[hosts.gx10]\naddress='x'\nprot=22\n")
    p = subprocess.run(
        [sys.executable, "-m", "fleetdeck.cli.main", cmd, "--hosts", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2, p.stderr
    assert str(bad) in p.stderr and "gx10" in p.stderr and "'prot'" in p.stderr
    assert "Traceback" not in p.stderr


def test_cli_missing_fleet_file_exits_2(tmp_path):
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "fleetdeck.cli.main",
            "--hosts",
            str(tmp_path / "nope.toml"),
            "status",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
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
    p = subprocess.run(
        [sys.executable, "-m", "fleetdeck.cli.main", "status", "--hosts", str(bad)],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 2
    assert f"{bad}: host 'a': command_timeout = inf is not a finite number" in p.stderr


@pytest.mark.parametrize(
    "line, said",
    [
        (
            "poll_interval = 1e400",
            "poll_interval = inf is not a finite number",
        ),  # TOML reads 1e400 as inf
        ("connect_timeout = -inf", "connect_timeout = -inf is not a finite number"),
        (
            "poll_interval = -1",
            "poll_interval = -1 is out of range: key 'poll_interval' must be between 0.1 and 3600",
        ),
        (
            "command_timeout = 1e9",
            "command_timeout = 1000000000.0 is out of range: key 'command_timeout' must be "
            "between 0.1 and 3600",
        ),
        ("port = 0", "port = 0 is out of range: key 'port' must be between 1 and 65535"),
        ("port = 99999999999999999999999", "port = (an integer of 23 digits) is out of range"),
        ("port = 22.0", "key 'port' must be an integer, not 22.0"),
        ("port = true", "key 'port' must be an integer, not true"),
        ("poll_interval = false", "key 'poll_interval' must be a number, not false"),
        ("poll_interval = '5'", "key 'poll_interval' must be a number, not '5'"),
    ],
)
def test_fleet_numbers_are_finite_and_in_range_naming_key_and_value(line, said):
    with pytest.raises(ConfigError) as e:
        parse_fleet(f"[hosts.a]\naddress = 'x'\n{line}\n", "f.toml")
    assert str(e.value).startswith(f"f.toml: host 'a': {said}")


def test_fleet_numbers_at_the_edges_of_their_ranges_are_taken():
    fleet = parse_fleet(
        "[defaults]\ncommand_timeout = 3600\n[hosts.a]\naddress = 'x'\nport = 65535\n"
        "poll_interval = 0.1\n",
        "f.toml",
    )
    (h,) = fleet.hosts
    assert (h.port, h.poll_interval, h.command_timeout) == (65535, 0.1, 3600.0)


def test_cli_exits_2_on_an_integer_too_long_to_read(tmp_path):
    bad = tmp_path / "hosts.toml"
    bad.write_text("[hosts.a]\naddress = 'x'\nport = " + "9" * 5000 + "\n")
    p = subprocess.run(
        [sys.executable, "-m", "fleetdeck.cli.main", "status", "--hosts", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (
        p.returncode == 2 and f"{bad}: not valid TOML" in p.stderr and "Traceback" not in p.stderr
    )


# -- ranges that mean something ------------------------------------------------------------------
from fleetdeck.backend.fleet.alert_rules import ALERT_NUMBERS, FOR_BOUNDS, AlertConfig  # noqa: E402
from fleetdeck.backend.fleet.config import FLEET_NUMBERS, SYSTEM_FOLDERS, SYSTEM_TREES  # noqa: E402

HOST = "[hosts.a]\naddress = 'x'\n"


@pytest.mark.parametrize(
    "text, said",
    [
        (
            HOST + "command_timeout = 1e-300\n",
            "f.toml: host 'a': command_timeout = 1e-300 is out of range: key 'command_timeout' must be between 0.1 and 3600",
        ),
        (
            "[defaults]\ncommand_timeout = 1e-300\n" + HOST,
            "f.toml: [defaults]: command_timeout = 1e-300 is out of range: key 'command_timeout' must be between 0.1 and "
            "3600",
        ),
        (
            HOST + "[alerts]\nwebhook_timeout = 1e308\n",
            "f.toml: [alerts]: webhook_timeout = 1e+308 is out of range: key 'webhook_timeout' must be between 0.1 and 300",
        ),
        (
            HOST + "[alerts]\nseat_check_interval = 1e-9\n",
            "f.toml: [alerts]: seat_check_interval = 1e-09 is out of range: key 'seat_check_interval' must be 0 (off) or "
            "between 1 and 86400",
        ),
        (
            HOST + "purge_roots = ['/']\n",
            "f.toml: host 'a': key 'purge_roots': / is the system's own folder; purge deletes inside its roots, so name "
            "the folders that hold runs (such as ~/runs)",
        ),
        (
            HOST + 'runs = ["~/runs\\u001b[2J"]\n',
            "f.toml: host 'a': key 'runs' must not hold control characters: \"~/runs\\x1b[2J\" holds \\x1b",
        ),
    ],
)
def test_values_no_one_means_are_refused_with_the_range_or_the_rule(text, said):
    with pytest.raises(ConfigError) as e:
        parse_fleet(text, "f.toml")
    assert str(e.value) == said
    assert "\x1b" not in str(e.value)


def _durations():
    """(table, key, bounds) of every number key of the fleet file but the port."""
    out = [("host", k, b) for k, b in FLEET_NUMBERS.items() if not b.integer]
    return out + [("alerts", k, b) for k, b in ALERT_NUMBERS.items()]


def _fleet_with(table: str, key: str, value: float) -> str:
    if table == "host":
        return HOST + f"{key} = {value!r}\n"
    extra = {
        "disk_rate_window": "disk_rate_min_span = 1\n",  # the pair's other key out of the way
        "disk_rate_min_span": "disk_rate_window = 604800\n",
    }.get(key, "")
    return HOST + f"[alerts]\n{extra}{key} = {value!r}\n"


@pytest.mark.parametrize("table, key, bounds", _durations(), ids=[k for _, k, _ in _durations()])
def test_every_number_has_a_floor_and_a_ceiling_and_takes_its_edges(table, key, bounds):
    assert bounds.low is not None and bounds.high is not None
    low = bounds.low + (1e-9 if bounds.above else 0)
    high = bounds.high - (1e-9 if bounds.below else 0)
    for v in (float(low), float(high)):
        fleet = parse_fleet(_fleet_with(table, key, v), "f.toml")
        got = getattr(fleet.hosts[0] if table == "host" else fleet.alerts, key)
        assert got == v
    where = "host 'a'" if table == "host" else "[alerts]"
    for v in (
        float(bounds.low - (0 if bounds.above else 1e-6 * max(1, bounds.low))),
        bounds.high * 1.001,
        1e308,
        -1.0,
    ):
        if bounds.zero and v == 0:
            continue
        with pytest.raises(ConfigError) as e:
            parse_fleet(_fleet_with(table, key, v), "f.toml")
        assert str(e.value).startswith(f"f.toml: {where}: {key} = ")
        assert f"is out of range: key {key!r} must be {bounds.words}" in str(e.value)


def test_every_alerts_number_has_its_range():
    floats = {f.name for f in __import__("dataclasses").fields(AlertConfig) if f.type == "float"}
    assert floats == set(ALERT_NUMBERS)


def test_the_ranges_table_in_the_docs_is_the_code():
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "fleet-file.md").read_text()
    table = doc[doc.index("### Ranges") : doc.index("### Paths")]
    rows = {
        line.split("|")[1].strip().strip("`"): line.split("|")[4]
        for line in table.splitlines()
        if line.startswith("| `")
    }
    from fleetdeck.backend.fleet.bounds import _plain

    for key, b in [*FLEET_NUMBERS.items(), *ALERT_NUMBERS.items(), ("for.RULE", FOR_BOUNDS)]:
        assert key in rows, key
        cell = rows[key]
        assert _plain(b.high) in cell, (key, cell)
        if b.above:
            assert f"greater than {_plain(b.low)}" in cell, (key, cell)
        else:
            assert cell.strip().startswith(
                f"0 (off), or {_plain(b.low)} to" if b.zero else f"{_plain(b.low)} to"
            ), (key, cell)


def test_seat_checks_off_and_for_zero_are_taken_but_a_signed_zero_is_not():
    fleet = parse_fleet(
        HOST + "[alerts]\nseat_check_interval = 0\nfor = { disk-full-eta = 0 }\n", "f.toml"
    )
    assert (
        fleet.alerts.seat_check_interval == 0.0 and fleet.alerts.for_seconds("disk-full-eta") == 0.0
    )
    with pytest.raises(
        ConfigError,
        match=r"seat_check_interval = -0.0 is out of range: .* \(a signed zero is not "
        r"taken: write 0\)",
    ):
        parse_fleet(HOST + "[alerts]\nseat_check_interval = -0.0\n", "f.toml")
    with pytest.raises(
        ConfigError,
        match=r"\[alerts\]: key 'for': disk-full-eta must be a number of seconds, 0 or "
        r"more and at most 604800 \(a week\), not -0.0",
    ):
        parse_fleet(HOST + "[alerts]\nfor = { disk-full-eta = -0.0 }\n", "f.toml")
    with pytest.raises(
        ConfigError, match="disk-full-eta must be a number of seconds, 0 or more and at most 604800"
    ):
        parse_fleet(HOST + "[alerts]\nfor = { disk-full-eta = 1e9 }\n", "f.toml")


@pytest.mark.parametrize(
    "alerts, said",
    [
        (
            "disk_rate_min_span = 4000",
            "f.toml: [alerts]: disk_rate_min_span = 4000 is out of range: key "
            "'disk_rate_min_span' must be at most disk_rate_window (1800, its default)",
        ),
        (
            "disk_rate_window = 600\ndisk_rate_min_span = 601",
            "f.toml: [alerts]: disk_rate_min_span = 601 is out of range: "
            "key 'disk_rate_min_span' must be at most disk_rate_window (600)",
        ),
        (
            "disk_rate_window = 120",
            "f.toml: [alerts]: disk_rate_window = 120 is out of range: key 'disk_rate_window' "
            "must be at least disk_rate_min_span (300, its default)",
        ),
    ],
)
def test_the_disk_rate_span_fits_in_its_window(alerts, said):
    with pytest.raises(ConfigError) as e:
        parse_fleet(HOST + f"[alerts]\n{alerts}\n", "f.toml")
    assert str(e.value) == said


REFUSED_ROOTS = [
    *SYSTEM_FOLDERS,
    *SYSTEM_TREES,
    "//",
    "/etc/",
    "//usr//",
    "/usr/local/runs",
    "/proc/self/cwd",
    "/home/",
    "/./var",
    "/boot/efi",
    "/lib64/x",
    "~/runs/../..",
    "/tank/../",
    "runs/..",
]


@pytest.mark.parametrize("root", REFUSED_ROOTS)
def test_purge_roots_refuse_the_systems_own_folders(root):
    with pytest.raises(ConfigError) as e:
        parse_fleet(HOST + f"purge_roots = ['~/runs', '{root}']\n", "f.toml")
    msg = str(e.value)
    assert msg.startswith("f.toml: host 'a': key 'purge_roots': ")
    assert ("the system's own folder" in msg) or ("holds '..'" in msg), msg


@pytest.mark.parametrize(
    "root",
    [
        "~/runs",
        "~",
        "~bob",
        "/root",
        "/root/runs",
        "/home/me",
        "/home/me/runs",
        "/var/lib/runs",
        "/run/media/me/disk/runs",
        "/tank/erp-tune",
        "/tmp/x",
        "runs",
        "/usr2",
        "/library",
        "/etcetera",
        "/.../x",
    ],
)
def test_purge_roots_take_homes_and_data_folders(root):
    fleet = parse_fleet(HOST + f"purge_roots = ['{root}']\n", "f.toml")
    assert fleet.hosts[0].roots_for_purge == (root,)


def test_runs_are_judged_as_purge_roots_only_when_purge_roots_is_not_set():
    with pytest.raises(ConfigError) as e:
        parse_fleet(HOST + "runs = ['/']\n", "f.toml")
    assert str(e.value) == (
        "f.toml: host 'a': key 'runs': / is the system's own folder; purge deletes inside runs "
        "when purge_roots is not set, so name the folders that hold runs (such as ~/runs), or "
        "set purge_roots"
    )
    with pytest.raises(
        ConfigError, match=r"^f.toml: \[defaults\]: key 'runs': /var is the system's own folder"
    ):
        parse_fleet("[defaults]\nruns = ['/var']\n" + HOST, "f.toml")
    fleet = parse_fleet(HOST + "runs = ['/']\npurge_roots = ['/tank']\n", "f.toml")
    assert fleet.hosts[0].roots_for_purge == ("/tank",)


def test_a_purge_root_in_defaults_is_named_there():
    with pytest.raises(ConfigError) as e:
        parse_fleet("[defaults]\npurge_roots = ['/etc']\n" + HOST, "f.toml")
    assert str(e.value).startswith(
        "f.toml: [defaults]: key 'purge_roots': /etc is the system's own folder"
    )


def test_tilde_is_judged_where_the_controller_knows_it(monkeypatch):
    monkeypatch.setenv("HOME", "/")
    text = "[hosts.here]\nlocal = true\npurge_roots = ['~']\n"
    with pytest.raises(ConfigError) as e:
        parse_fleet(text, "f.toml")
    assert str(e.value).startswith(
        "f.toml: host 'here': key 'purge_roots': '~' (/, as ~ is / on this machine) is "
        "the system's own folder"
    )
    with pytest.raises(ConfigError, match=r"^f.toml: host 'here': key 'purge_roots': '~/etc'"):
        parse_fleet("[defaults]\npurge_roots = ['~/etc']\n[hosts.here]\nlocal = true\n", "f.toml")
    # a remote host's ~ is its login's home there, whatever it is here
    assert parse_fleet(HOST + "purge_roots = ['~']\n", "f.toml").hosts[0].roots_for_purge == ("~",)
    monkeypatch.setenv("HOME", "/home/me")
    assert parse_fleet(text, "f.toml").hosts[0].roots_for_purge == ("~",)


CONTROL = ["\x1b", "\x00", "\x07", "\t", "\n", "\r", "\x7f", "\x9b", "\u200b", "\u202e", "\u2028"]


@pytest.mark.parametrize(
    "key, list_key",
    [
        ("address", False),
        ("user", False),
        ("python", False),
        ("known_hosts", False),
        ("runs", True),
        ("purge_roots", True),
        ("client_keys", True),
    ],
)
@pytest.mark.parametrize("ch", CONTROL, ids=[f"U+{ord(c):04X}" for c in CONTROL])
def test_control_characters_in_a_path_or_name_are_refused_naming_the_key(key, list_key, ch):
    value = f'"~/x\\u{ord(ch):04x}[2J"'  # TOML's own escape, so the file holds the character
    line = f"{key} = [{value}]" if list_key else f"{key} = {value}"
    table = "[hosts.a]\n" + ("" if key == "address" else "address = 'x'\n")
    with pytest.raises(ConfigError) as e:
        parse_fleet(table + line + "\n", "f.toml")
    msg = str(e.value)
    assert msg.startswith(f"f.toml: host 'a': key {key!r} must not hold control characters: \"~/x")
    assert ch not in msg and msg.isprintable()
    if key != "address":  # per host only
        with pytest.raises(
            ConfigError, match=rf"^f.toml: \[defaults\]: key {key!r} must not hold control"
        ):
            parse_fleet("[defaults]\n" + line + "\n" + HOST, "f.toml")


def test_printable_names_are_taken():
    fleet = parse_fleet(
        HOST + "runs = ['~/runs', '/tank/Läufe 2024', '/data/ラン']\nuser = 'ops-1'\n", "f.toml"
    )
    assert fleet.hosts[0].runs == ("~/runs", "/tank/Läufe 2024", "/data/ラン")


def test_a_control_character_in_the_webhook_url_is_refused():
    with pytest.raises(ConfigError) as e:
        parse_fleet(
            HOST + '[alerts]\nwebhook = "https://hooks.example/\\u001b]52;c;x\\u0007"\n', "f.toml"
        )
    assert str(e.value) == (
        "f.toml: [alerts]: key 'webhook' must not hold control characters: "
        '"https://hooks.example/\\x1b]52;c;x\\x07" holds \\x1b'
    )


@pytest.mark.parametrize(
    "line, said",
    [
        ("command_timeout = 1e-300", "host 'a': command_timeout = 1e-300 is out of range"),
        ("purge_roots = ['/']", "host 'a': key 'purge_roots': / is the system's own folder"),
    ],
)
def test_cli_exits_2_on_a_value_no_one_means(tmp_path, line, said):
    bad = tmp_path / "hosts.toml"
    bad.write_text(f"[hosts.a]\naddress = 'x'\n{line}\n")
    p = subprocess.run(
        [sys.executable, "-m", "fleetdeck.cli.main", "status", "--hosts", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2 and f"{bad}: {said}" in p.stderr and "Traceback" not in p.stderr
