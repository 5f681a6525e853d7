"""The purge helper: runs on the purged host (stdlib + the host library, Python 3.8+).

Requests (JSON on stdin, answered through `serve`):

- `{"op": "check", "paths": [...], "roots": [...]}` gathers the facts a purge is judged on;
- `{"op": "check", "keep": {"run", "n"}, "roots": [...]}` does the same for a run that keeps its
  newest N checkpoints instead of a final adapter: the paths are its older checkpoints, the
  keepers every file of the N kept ones (`keep_newest`);
- `{"op": "execute", "paths", "roots", "plan": {"pins", "keepers"}, ["keep"]}` gathers them again,
  refuses everything if any path fails a check or moved since the plan (pins of every
  component, keeper files), and otherwise removes one path at a time with `remove_pinned`,
  then hashes the keepers again.

The controller imports `verdict.evaluate` from beside it, so both sides judge with the same
code, and names this module (its `__name__`) as the helper it sends.
Keepers are judged by the host library's one final-adapter rule (`layout`).

This module answers the requests; the rest lives beside it in this package: `paths` (a path
walked by fd and pinned, with purge's refusal codes), `facts` (`gather`), `verdict` (`evaluate`,
`CHECKS`) and `remove` (`remove_pinned`); `wire` declares each op's request and answer.
"""
# It runs on the host's Python 3.8 or newer: %-formatting stays.
# ruff: noqa: UP031

from __future__ import annotations

import sys
from typing import List, Optional

from fleetdeck.backend.host.lib.serve import Refused, serve
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.host.purge.facts import (
    gather,
    gather_with_inodes,
)
from fleetdeck.backend.host.purge.keepers import keep_newest
from fleetdeck.backend.host.purge.paths import (
    WalkError,
    sha256_file,
)
from fleetdeck.backend.host.purge.remove import (
    remove_pinned,
)
from fleetdeck.backend.host.purge.verdict import evaluate
from fleetdeck.backend.host.purge.wire import (
    CHECK,
    EXECUTE,
    CheckRequest,
    Executed,
    ExecuteRequest,
    Facts,
    Removal,
)


def execute(req: ExecuteRequest) -> Executed:
    """Check everything again, compare with the plan, remove one path at a time, verify."""
    paths, plan = req["paths"], req["plan"]
    facts, inodes = gather_with_inodes(paths, req["roots"], hashing=False, keep=req.get("keep"))
    facts["allow_best"] = req.get("allow_best") or []
    verdict = evaluate(facts)
    changed: List[Optional[str]] = [None] * len(paths)
    for n, p in enumerate(facts["paths"]):
        if p["error"] or p["pins"] != plan["pins"][n]:
            changed[n] = "it is not the folder that was checked (a component was replaced or moved)"
    now = {f["path"]: f for k in facts["keepers"] for f in k["files"]}
    for f in plan["keepers"]:
        g = now.get(f["path"])
        if g is None or [g["dev"], g["ino"], g["bytes"], g["mtime_ns"]] != [
            f["dev"],
            f["ino"],
            f["bytes"],
            f["mtime_ns"],
        ]:
            changed = [
                c or "kept file %s changed since the check" % shown(f["path"]) for c in changed
            ]
    result: Executed = {
        "facts": facts,
        "verdict": verdict,
        "changed": changed,
        "results": [],
        "attempted": False,
    }
    if any(changed) or any(v["refusals"] for v in verdict["paths"]):
        return result
    result["attempted"] = True
    keep = {(f["dev"], f["ino"]) for f in plan["keepers"]}
    keep.update(tuple(k["dir"]) for k in facts["keepers"] if k.get("dir"))
    keep.update(tuple(d) for k in facts["keepers"] for d in k.get("dirs") or [])
    stop = None
    for n, p in enumerate(facts["paths"]):
        r: Removal = {"deleted": False, "error": None, "changed": None, "free_bytes_after": None}
        result["results"].append(r)
        if stop:
            r["error"] = "not attempted: %s" % stop
            continue
        try:
            r["free_bytes_after"] = remove_pinned(
                [c for c in p["abs"].split("/") if c], plan["pins"][n], inodes[n], keep
            )
            r["deleted"] = True
        except WalkError as e:
            r["changed"] = e.detail
            stop = "an earlier path changed since the check"
        except OSError as e:
            r["error"] = "%s: %s" % (
                shown(e.filename) if isinstance(e.filename, str) else "delete",
                e.strerror,
            )
            stop = "an earlier path failed"
    result["sha256_after"] = {}
    for f in plan["keepers"]:
        try:
            result["sha256_after"][f["path"]] = sha256_file(f["path"])
        except (OSError, WalkError):
            result["sha256_after"][f["path"]] = None
    return result


def _check(req: CheckRequest) -> Facts:
    if isinstance(req.get("keep"), dict) and isinstance(req.get("roots"), list):
        rule = keep_newest(req["keep"].get("run"), req["keep"].get("n"), req["roots"])
        facts = gather(
            rule["purge"],
            req["roots"],
            hashing=True,
            keep={"run": rule["run"], "kept": rule["kept"]} if rule["run"] else None,
        )
        facts["keep"] = rule
        return facts
    if not isinstance(req.get("paths"), list) or not isinstance(req.get("roots"), list):
        raise Refused("bad-request", "a check needs a list of paths and a list of roots")
    return gather(req["paths"], req["roots"], hashing=True)


def _execute(req: ExecuteRequest) -> Executed:
    if not isinstance(req.get("plan"), dict) or len(req["plan"].get("pins") or []) != len(
        req.get("paths") or []
    ):
        raise Refused("bad-request", "an execute request needs the plan's pins for every path")
    allow = req.get("allow_best")
    if allow is not None and not (
        isinstance(allow, list) and all(isinstance(x, str) for x in allow)
    ):
        raise Refused("bad-request", "allow_best is a list of checkpoint paths")
    keep = req.get("keep")
    if keep is not None and not (
        isinstance(keep, dict)
        and isinstance(keep.get("run"), str)
        and isinstance(keep.get("kept"), list)
        and keep["kept"]
    ):
        raise Refused("bad-request", "a keep rule needs its run and the checkpoints it keeps")
    return execute(req)


OPS = {CHECK: _check, EXECUTE: _execute}

if __name__ == "__main__":
    sys.exit(serve(OPS))
