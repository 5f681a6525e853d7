"""Docker asked in one place: which containers there are, and one `docker inspect` of them.

Purge judges the mounts of every container (stopped ones too); the probe's seats section
reads the running ones. Both ask through `query`, and each words its own refusals.
"""
# Runs on the host's Python 3.8 or newer.

from __future__ import annotations

import json

from fleetdeck.backend.host.lib import runner


def query(
    all_containers: bool = False,
    exe: str | None = None,
    timeout: float = 30,
    errors: str = "replace",
) -> dict:
    """`docker ps -q --no-trunc` (`-a` too with `all_containers`), then one `docker inspect`
    of the ids it listed. A dict: `exe` (None: no docker command here), `ids`, `docs` (the
    inspect documents, a list, when everything answered), and where it stopped: `failed` is
    None, "ps" or "inspect" (`result` is that command's runner result) or "json" (`error`,
    the parse error); inspect's output is decoded with `errors`."""
    out = {  # type: dict
        "exe": exe or runner.which("docker"),
        "ids": [],
        "docs": None,
        "failed": None,
        "result": None,
        "error": None,
    }
    if not out["exe"]:
        return out
    r = runner.run(
        [out["exe"], "ps"] + (["-a"] if all_containers else []) + ["-q", "--no-trunc"],
        timeout=timeout,
    )
    if r.rc != 0:
        out["failed"], out["result"] = "ps", r
        return out
    out["ids"] = r.out.decode("ascii", "replace").split()
    if not out["ids"]:
        out["docs"] = []
        return out
    r = runner.run([out["exe"], "inspect"] + out["ids"], timeout=timeout)
    if r.rc != 0:
        out["failed"], out["result"] = "inspect", r
        return out
    try:
        out["docs"] = json.loads(r.out.decode("utf-8", errors))
    except ValueError as e:
        out["failed"], out["error"] = "json", e
    return out
