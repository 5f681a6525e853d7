"""The fleet file (hosts.toml): where it is found, and strict validation into frozen models."""

from __future__ import annotations

import os
import posixpath
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from fleetdeck.backend.fleet import statedir
from fleetdeck.backend.fleet.alert_rules import parse_alerts
from fleetdeck.backend.fleet.bounds import (
    DAY,
    HOUR,
    WEEK,
    Bounds,
    control_problem,
    number_problem,
    toml_shown,
)
from fleetdeck.backend.fleet.errors import ConfigError
from fleetdeck.backend.host.lib import fsinfo

HOST_NAME = re.compile(r"^[A-Za-z0-9._-]+$")


# the system folders no purge root may be (the host library's one list: the purge helper
# judges the roots it resolves on the host by it too)
SYSTEM_TREES, SYSTEM_FOLDERS = fsinfo.SYSTEM_TREES, fsinfo.SYSTEM_FOLDERS


def purge_root_problem(key: str, given: str, home: str | None = None) -> str | None:
    """None when purge may delete inside `given`; else why not, naming the key. `~` is judged
    only where the controller knows what it expands to (`home`: a `local` host, this machine);
    on a remote host it is the login's home there, and only `..`, refused everywhere, could
    climb out of it. A home itself (`~`, `/root`, `/home/NAME`) is taken: on a machine one logs
    into as root, /root is where runs live."""
    if ".." in given.split("/"):
        return (
            f"key {key!r}: {given!r} holds '..': write the folder itself (a purge root is "
            "compared as written, and '..' can climb to /)"
        )
    path = given
    if given == "~" or given.startswith("~/"):
        if home is None:
            return None  # the login's home on the host, or a folder inside it
        path = home + given[1:]
    elif given.startswith("~"):
        return None  # ~user: that user's home on the host
    if not path.startswith("/"):
        return None  # relative: inside the login's folder on the host
    norm = "/" + posixpath.normpath(path).lstrip("/")
    norm = "/" if norm == "/." else norm
    named = (
        norm
        if norm == given
        else f"{given!r} ({norm}{f', as ~ is {home} on this machine' if path != given else ''})"
    )
    if norm in SYSTEM_FOLDERS or norm in SYSTEM_TREES:
        return f"key {key!r}: {named} is the system's own folder"
    top = next((t for t in SYSTEM_TREES if norm.startswith(t + "/")), None)
    if top:
        return (
            f"key {key!r}: {named} lies inside {top}, the system's own folder, where no run lives"
        )
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


#: the fleet file's number keys and their documented ranges (docs/fleet-file.md, one table with
#: the `[alerts]` ones of `alert_rules.ALERT_NUMBERS`). Each duration has a floor below which it
#: means nothing a host can do (a poll every nanosecond, a timeout that has passed before the
#: command is sent) and a ceiling past which it means "never" (a host that takes an hour to
#: answer is down).
FLEET_NUMBERS: dict[str, Bounds] = {
    "poll_interval": Bounds(0.1, HOUR),
    "connect_timeout": Bounds(0.1, HOUR),
    "command_timeout": Bounds(0.1, HOUR),
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
        if not all(isinstance(v, str) and v for v in value):  # type: ignore[attr-defined]
            raise ConfigError(f"{source}: {where}: key {key!r} must be {wanted}")
    for text in value if key in _LIST_KEYS else (value,):  # type: ignore[attr-defined]
        problem = control_problem(key, text) if isinstance(text, str) else None
        if problem:
            raise ConfigError(f"{source}: {where}: {problem}")
    if key in _LIST_KEYS:
        return tuple(value)  # type: ignore[arg-type]
    if key == "become" and value != "sudo":
        raise ConfigError(f"{source}: {where}: key 'become' must be {wanted}, not {value!r}")
    return value


def _check_purge_roots(
    source: str, where: str, table: dict[str, object], values: dict[str, object]
) -> None:
    """The folders purge may delete inside (`purge_roots`, else `runs`) are none of the
    system's own; the error names the table the key was written in."""
    key = "purge_roots" if "purge_roots" in values else "runs"
    roots = values.get(key, HostConfig.runs)
    home = os.path.expanduser("~") if values.get("local") else None
    for root in roots:  # type: ignore[attr-defined]
        problem = purge_root_problem(key, root, home)
        if problem and ".." not in root.split("/"):
            problem += (
                "; purge deletes inside its roots, so name the folders that hold runs (such as ~/runs)"
                if key == "purge_roots"
                else "; purge deletes inside runs when purge_roots is not set, so name the folders that "
                "hold runs (such as ~/runs), or set purge_roots"
            )
        if problem:
            # a value of [defaults] is named there, unless only this host's `~` makes it wrong
            named = where if key in table or purge_root_problem(key, root) is None else "[defaults]"
            raise ConfigError(f"{source}: {named}: {problem}")


def parse_fleet(text: str, source: str) -> Fleet:
    """Parse fleet-file text strictly; ConfigError names the file, the host and the key."""
    try:
        doc = tomllib.loads(text)
    except ValueError as e:  # TOMLDecodeError, or an integer too long for Python to read
        raise ConfigError(f"{source}: not valid TOML: {e}") from None
    for key in doc:
        if key not in ("defaults", "hosts", "alerts"):
            raise ConfigError(
                f"{source}: unknown top-level key {key!r} (expected [defaults], [hosts.NAME] "
                "and [alerts])"
            )
    defaults_raw = doc.get("defaults", {})
    if not isinstance(defaults_raw, dict):
        raise ConfigError(f"{source}: 'defaults' must be a table")
    defaults = {
        k: _check(source, "[defaults]", k, v, _DEFAULT_KEYS) for k, v in defaults_raw.items()
    }
    hosts_raw = doc.get("hosts", {})
    if not isinstance(hosts_raw, dict):
        raise ConfigError(f"{source}: 'hosts' must be a table of [hosts.NAME] tables")
    if not hosts_raw:
        raise ConfigError(f"{source}: no hosts: add at least one [hosts.NAME] table")
    hosts = []
    for name, table in hosts_raw.items():
        where = f"host {name!r}"
        if not HOST_NAME.match(name):
            raise ConfigError(
                f"{source}: {where}: a host name may only hold letters, digits, '.', '_' and '-'"
            )
        if not isinstance(table, dict):
            raise ConfigError(f"{source}: {where}: must be a table")
        values = dict(defaults)
        for k, v in table.items():
            values[k] = _check(source, where, k, v, set(_TYPES))
        if values.get("local"):
            if "address" in values:
                raise ConfigError(
                    f"{source}: {where}: key 'address' cannot be combined with local = true"
                )
        elif not values.get("address"):
            raise ConfigError(f"{source}: {where}: missing key 'address' (or set local = true)")
        _check_purge_roots(source, where, table, values)
        hosts.append(HostConfig(name=name, **values))
    alerts = None
    if "alerts" in doc:
        alerts = parse_alerts(doc["alerts"], source)
    return Fleet(hosts=tuple(hosts), source=source, alerts=alerts)


BUILTIN_FLEET = Fleet(
    hosts=(HostConfig(name="local", local=True),), source="built-in fleet (this machine)"
)


def find_fleet_file(
    explicit: str | None = None, env: Mapping[str, str] | None = None
) -> Path | None:
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
        return statedir.read_file(path).decode("utf-8")
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


__all__ = [
    "Bounds",
    "ConfigError",
    "Fleet",
    "HostConfig",
    "BUILTIN_FLEET",
    "DAY",
    "HOUR",
    "WEEK",
    "load_fleet",
    "parse_fleet",
    "find_fleet_file",
    "number_problem",
    "control_problem",
    "purge_root_problem",
    "toml_shown",
]
