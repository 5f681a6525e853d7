"""RUN.toml on both sides of a launch: read strictly (the trainer's own parser) into the
values the launch helper gets, with each path as the host will read it, and the copy a run
was launched with read back from its folder on the host."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from fleetdeck.backend.fleet.config import ConfigError, HostConfig
from fleetdeck.backend.fleet.link.ssh import HostLink
from fleetdeck.backend.train.runconfig import config_to_dict, read_run_doc, run_config_from_doc

PATH_KEYS = ("corpus", "output", "tokenizer", "base_model")


def _host_path(value: str, key: str, host: HostConfig, base: Path, source: str) -> str:
    """A path as the host will read it: absolute or `~` as written; relative only for `local`."""
    if value.startswith("~") or value.startswith("/"):
        return value
    if host.local:
        return str((base / value).absolute())
    raise ConfigError(
        f"{source}: key {key!r} is a relative path ({value!r}); for remote host "
        f"{host.name} write it absolute or starting with ~/"
    )


def run_values(run: str | os.PathLike[str] | dict[str, Any], host: HostConfig) -> dict[str, Any]:
    """RUN.toml (a file, or its values as a dict) checked strictly, as JSON-able values with the
    paths as the host reads them. ConfigError names the file and the key."""
    if isinstance(run, dict):
        doc, source, base = dict(run), "RUN.toml values", Path.cwd()
    else:
        p = Path(run)
        doc, source, base = read_run_doc(p), str(p), p.absolute().parent
    # the trainer's own parser: unknown keys and wrong types fail here, before any host is asked
    for key in PATH_KEYS:
        if key in doc and not isinstance(doc[key], str):
            raise ConfigError(f"{source}: key {key!r} must be a string, not {doc[key]!r}")
    values = config_to_dict(run_config_from_doc(doc, source, base))
    values.pop("source", None)
    for key in PATH_KEYS:
        raw = doc.get(key)
        if raw is None or (key == "base_model" and raw.startswith("random:")):
            continue
        values[key] = _host_path(raw, key, host, base, source)
    return values


def launch_after_path(after: str | None, host: HostConfig) -> str | None:
    if after is None:
        return None
    return _host_path(after, "--after", host, Path.cwd(), "--after")


RUN_TOML_LIMIT = 1 << 20


async def read_run_toml(link: HostLink, run_path: str) -> dict[str, Any] | None:
    """The RUN.toml a run was launched with, read from its folder on the host (bounded, as
    any command's output), parsed; None when the folder holds none (not started by `launch`).
    HostError when the host cannot be asked; ValueError naming the file when it is not TOML."""
    res = await link.run(["cat", "--", f"{run_path}/RUN.toml"], timeout=10, limit=RUN_TOML_LIMIT)
    if res.returncode != 0:
        return None
    try:
        return tomllib.loads(res.stdout.decode("utf-8", "replace"))
    except ValueError as e:
        raise ValueError(f"{run_path}/RUN.toml on {link.name} is not valid TOML: {e}") from None
