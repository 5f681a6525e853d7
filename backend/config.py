"""The fleet file (hosts.toml): where it is found, and strict validation into frozen models."""

from __future__ import annotations

import math
import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

HOST_NAME = re.compile(r"^[A-Za-z0-9._-]+$")


class ConfigError(Exception):
    """A fleet file (or RUN.toml) that cannot be used; the message names file, host and key."""


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

    @property
    def roots_for_purge(self) -> tuple[str, ...]:
        """The folders purge may delete inside: `purge_roots`, else `runs`."""
        return self.purge_roots if self.purge_roots is not None else self.runs


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


# key -> (accepted python types, converter); `address` and `local` are per-host only
_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "poll_interval": ((int, float), "a number"),
    "connect_timeout": ((int, float), "a number"),
    "command_timeout": ((int, float), "a number"),
    "known_hosts": ((str,), "a string"),
    "client_keys": ((list,), "a list of strings"),
    "accept_new_host_keys": ((bool,), "true or false"),
    "python": ((str,), "a string"),
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
_POSITIVE = {"poll_interval", "connect_timeout", "command_timeout"}


def _check(source: str, where: str, key: str, value: object, allowed: set[str]) -> object:
    if key not in allowed:
        raise ConfigError(f"{source}: {where}: unknown key {key!r}")
    types, wanted = _TYPES[key]
    if isinstance(value, bool) and bool not in types:
        raise ConfigError(f"{source}: {where}: key {key!r} must be {wanted}, not {value!r}")
    if not isinstance(value, types):
        raise ConfigError(f"{source}: {where}: key {key!r} must be {wanted}, not {value!r}")
    if key in _LIST_KEYS:
        if not all(isinstance(v, str) and v for v in value):  # type: ignore[union-attr]
            raise ConfigError(f"{source}: {where}: key {key!r} must be {wanted}")
        return tuple(value)  # type: ignore[arg-type]
    if key in _POSITIVE and not math.isfinite(value):  # type: ignore[arg-type]
        # TOML has inf and nan; a timeout of inf never fires, and nan compares false with all
        raise ConfigError(f"{source}: {where}: key {key!r} must be a finite number of seconds, not {value!r}")
    if key in _POSITIVE and value <= 0:  # type: ignore[operator]
        raise ConfigError(f"{source}: {where}: key {key!r} must be greater than 0")
    if key == "port" and not 0 < value < 65536:  # type: ignore[operator]
        raise ConfigError(f"{source}: {where}: key 'port' must be between 1 and 65535")
    if key in _POSITIVE:
        return float(value)  # type: ignore[arg-type]
    return value


def parse_fleet(text: str, source: str) -> Fleet:
    """Parse fleet-file text strictly; ConfigError names the file, the host and the key."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
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
        from .alerts import parse_alerts  # alerts.py imports this module's ConfigError

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


__all__ = ["ConfigError", "Fleet", "HostConfig", "BUILTIN_FLEET", "load_fleet", "parse_fleet",
           "find_fleet_file"]
