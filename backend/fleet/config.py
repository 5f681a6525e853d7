"""The fleet file (hosts.toml): where it is found, and strict validation into frozen models."""

from __future__ import annotations

import math
import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from fleetdeck.backend.fleet.errors import ConfigError

HOST_NAME = re.compile(r"^[A-Za-z0-9._-]+$")


@dataclass(frozen=True)
class Bounds:
    """The documented range of one number key: an integer or any finite number, between `low`
    and `high` (inclusive unless `above` / `below`; None: no bound on that side)."""

    low: float | None = None
    high: float | None = None
    integer: bool = False
    #: `low` itself is out of range
    above: bool = False
    #: `high` itself is out of range
    below: bool = False

    @property
    def kind(self) -> str:
        """What the key holds, in words: "an integer" or "a number"."""
        return "an integer" if self.integer else "a number"

    @property
    def words(self) -> str:
        """The range in words: "greater than 0 and below 1", "between 1 and 65535"..."""
        lo = None if self.low is None else f"{'greater than' if self.above else 'at least'} {_plain(self.low)}"
        hi = None if self.high is None else f"{'below' if self.below else 'at most'} {_plain(self.high)}"
        if lo and hi and not self.above and not self.below:
            return f"between {_plain(self.low)} and {_plain(self.high)}"
        return " and ".join(w for w in (lo, hi) if w) or "finite"


def _plain(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def toml_shown(value: object) -> str:
    """A value as TOML writes it, for a message: `true`, `inf`, `nan`, `"text"`; an integer too
    long to print whole is named by its size."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if value != value else ("inf" if value > 0 else "-inf")
    if isinstance(value, int) and value.bit_length() > 64:
        try:
            digits = str(len(str(abs(value))))
        except ValueError:  # past Python's limit for printing an integer
            digits = "thousands of"
        return f"{'-' if value < 0 else ''}(an integer of {digits} digits)"
    return repr(value)


def number_problem(key: str, value: object, bounds: Bounds) -> str | None:
    """None when `value` is a number `bounds` allows; else the sentence saying why not, naming
    the key and the value (the caller puts the file and table in front). A boolean is never a
    number, NaN and the infinities (TOML's `nan`, `inf`, and `1e400` which TOML reads as inf)
    are never finite, and a float is never an integer."""
    shown_v = toml_shown(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            bounds.integer and not isinstance(value, int)):
        return f"key {key!r} must be {bounds.kind}, not {shown_v}"
    if isinstance(value, float) and not math.isfinite(value):
        return f"{key} = {shown_v} is not a finite number"
    if ((bounds.low is not None and (value < bounds.low or (bounds.above and value == bounds.low)))
            or (bounds.high is not None and (value > bounds.high or (bounds.below and value == bounds.high)))):
        return f"{key} = {shown_v} is out of range: key {key!r} must be {bounds.words}"
    return None


@dataclass(frozen=True)
class HostConfig:
    """One host of the fleet, with every default already applied."""

    name: str
    #: hostname, IP, or a Host alias from ~/.ssh/config; empty for the local host
    address: str = ""
    #: this machine, reached without SSH
    local: bool = False
    port: int | None = None
    user: str | None = None
    #: each subfolder of these is a training run; `~` expands on the host
    runs: tuple[str, ...] = ("~/runs",)
    #: purge refuses any path outside these; default: `runs`
    purge_roots: tuple[str, ...] | None = None
    poll_interval: float = 5.0
    connect_timeout: float = 5.0
    command_timeout: float = 30.0
    known_hosts: str = "~/.ssh/known_hosts"
    #: None: ssh-agent and the usual key files
    client_keys: tuple[str, ...] | None = None
    accept_new_host_keys: bool = False
    #: interpreter on the host for the probe, the helpers and the trainer
    python: str = "python3"
    #: keep helper payloads in a cache on the host, so a later connection sends only their
    #: sha256 (docs/probe.md); false: every helper is sent whole, compressed, each time
    payload_cache: bool = True
    #: "sudo": every helper (the probe, purge, mirror, schedules...) runs through `sudo -n`, so
    #: a login that is not root can act on other users' files; None: as the login itself
    become: str | None = None

    @property
    def roots_for_purge(self) -> tuple[str, ...]:
        """The folders purge may delete inside: `purge_roots`, else `runs`."""
        return self.purge_roots if self.purge_roots is not None else self.runs

    @property
    def all_roots(self) -> list[str]:
        """Every configured root, runs first, each once (the probe's disks, the log reader's runs)."""
        return list(dict.fromkeys([*self.runs, *self.roots_for_purge]))


@dataclass(frozen=True)
class Fleet:
    """The parsed fleet file: hosts in file order, and where they came from."""

    hosts: tuple[HostConfig, ...]
    source: str = "built-in"
    #: the `[alerts]` table (`alerts.AlertConfig`); None: every default
    alerts: object | None = None

    def host(self, name: str) -> HostConfig:
        """The host called `name`; ConfigError if the fleet has none."""
        for h in self.hosts:
            if h.name == name:
                return h
        known = ", ".join(h.name for h in self.hosts)
        raise ConfigError(f"{self.source}: no host named {name!r} (hosts: {known})")

    @property
    def poll_interval(self) -> float:
        """The fleet's poll interval: the shortest any host asks for."""
        return min((h.poll_interval for h in self.hosts), default=5.0)


#: the fleet file's number keys and their documented ranges (docs/fleet-file.md)
WEEK = 7 * 86400
FLEET_NUMBERS: dict[str, Bounds] = {
    "poll_interval": Bounds(0, WEEK, above=True),
    "connect_timeout": Bounds(0, WEEK, above=True),
    "command_timeout": Bounds(0, WEEK, above=True),
    "port": Bounds(1, 65535, integer=True),
}

# key -> (accepted python types, converter); `address` and `local` are per-host only
_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "poll_interval": ((int, float), "a number"),
    "connect_timeout": ((int, float), "a number"),
    "command_timeout": ((int, float), "a number"),
    "known_hosts": ((str,), "a string"),
    "client_keys": ((list,), "a list of strings"),
    "accept_new_host_keys": ((bool,), "true or false"),
    "python": ((str,), "a string"),
    "payload_cache": ((bool,), "true or false"),
    "become": ((str,), '"sudo" (the only way to become root that is offered)'),
    "address": ((str,), "a string"),
    "local": ((bool,), "true or false"),
    "port": ((int,), "an integer"),
    "user": ((str,), "a string"),
    "runs": ((list,), "a list of strings"),
    "purge_roots": ((list,), "a list of strings"),
}
_HOST_ONLY = {"address", "local"}
_DEFAULT_KEYS = set(_TYPES) - _HOST_ONLY
_LIST_KEYS = {"client_keys", "runs", "purge_roots"}


def _check(source: str, where: str, key: str, value: object, allowed: set[str]) -> object:
    if key not in allowed:
        raise ConfigError(f"{source}: {where}: unknown key {key!r}")
    if key in FLEET_NUMBERS:
        problem = number_problem(key, value, FLEET_NUMBERS[key])
        if problem:
            raise ConfigError(f"{source}: {where}: {problem}")
        return value if FLEET_NUMBERS[key].integer else float(value)  # type: ignore[arg-type]
    types, wanted = _TYPES[key]
    if isinstance(value, bool) and bool not in types:
        raise ConfigError(f"{source}: {where}: key {key!r} must be {wanted}, not {value!r}")
    if not isinstance(value, types):
        raise ConfigError(f"{source}: {where}: key {key!r} must be {wanted}, not {value!r}")
    if key in _LIST_KEYS:
        if not all(isinstance(v, str) and v for v in value):  # type: ignore[union-attr]
            raise ConfigError(f"{source}: {where}: key {key!r} must be {wanted}")
        return tuple(value)  # type: ignore[arg-type]
    if key == "become" and value != "sudo":
        raise ConfigError(f"{source}: {where}: key 'become' must be {wanted}, not {value!r}")
    return value


def parse_fleet(text: str, source: str) -> Fleet:
    """Parse fleet-file text strictly; ConfigError names the file, the host and the key."""
    try:
        doc = tomllib.loads(text)
    except ValueError as e:  # TOMLDecodeError, or an integer too long for Python to read
        raise ConfigError(f"{source}: not valid TOML: {e}") from None
    for key in doc:
        if key not in ("defaults", "hosts", "alerts"):
            raise ConfigError(f"{source}: unknown top-level key {key!r} (expected [defaults], [hosts.NAME] "
                              "and [alerts])")
    defaults_raw = doc.get("defaults", {})
    if not isinstance(defaults_raw, dict):
        raise ConfigError(f"{source}: 'defaults' must be a table")
    defaults = {k: _check(source, "[defaults]", k, v, _DEFAULT_KEYS) for k, v in defaults_raw.items()}
    hosts_raw = doc.get("hosts", {})
    if not isinstance(hosts_raw, dict):
        raise ConfigError(f"{source}: 'hosts' must be a table of [hosts.NAME] tables")
    if not hosts_raw:
        raise ConfigError(f"{source}: no hosts: add at least one [hosts.NAME] table")
    hosts = []
    for name, table in hosts_raw.items():
        where = f"host {name!r}"
        if not HOST_NAME.match(name):
            raise ConfigError(f"{source}: {where}: a host name may only hold letters, digits, '.', '_' and '-'")
        if not isinstance(table, dict):
            raise ConfigError(f"{source}: {where}: must be a table")
        values = dict(defaults)
        for k, v in table.items():
            values[k] = _check(source, where, k, v, set(_TYPES))
        if values.get("local"):
            if "address" in values:
                raise ConfigError(f"{source}: {where}: key 'address' cannot be combined with local = true")
        elif not values.get("address"):
            raise ConfigError(f"{source}: {where}: missing key 'address' (or set local = true)")
        hosts.append(HostConfig(name=name, **values))  # type: ignore[arg-type]
    alerts = None
    if "alerts" in doc:
        from fleetdeck.backend.fleet.alert_rules import parse_alerts

        alerts = parse_alerts(doc["alerts"], source)
    return Fleet(hosts=tuple(hosts), source=source, alerts=alerts)


BUILTIN_FLEET = Fleet(hosts=(HostConfig(name="local", local=True),), source="built-in fleet (this machine)")


def find_fleet_file(explicit: str | None = None, env: dict[str, str] | None = None) -> Path | None:
    """The fleet file by the contract's order; None means the built-in fleet."""
    env = os.environ if env is None else env
    if explicit:
        return Path(explicit)
    if env.get("FLEETDECK_HOSTS"):
        return Path(env["FLEETDECK_HOSTS"])
    if Path("hosts.toml").is_file():
        return Path("hosts.toml")
    xdg = env.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    candidate = Path(xdg) / "fleetdeck" / "hosts.toml"
    if candidate.is_file():
        return candidate
    return None


def read_config_text(path: Path, what: str) -> str:
    """A config file's text; ConfigError naming it when it is missing or unreadable."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: {what} not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read {what}: {e}") from None


def load_fleet(explicit: str | None = None) -> Fleet:
    """Find and parse the fleet file; the built-in one-host fleet when there is none."""
    path = find_fleet_file(explicit)
    if path is None:
        return BUILTIN_FLEET
    return parse_fleet(read_config_text(path, "fleet file"), str(path))


__all__ = ["Bounds", "ConfigError", "Fleet", "HostConfig", "BUILTIN_FLEET", "load_fleet", "parse_fleet",
           "find_fleet_file", "number_problem", "toml_shown"]
