"""Purge's facts of keeping: the runs that lose a checkpoint to a purge, and what each keeps
(its final adapter by the layout's rule, or, under the keep rule `keep_newest`, its newest
complete checkpoints), walked without following links and hashed, so `verdict` can hold the
purge to what survives it."""
# Runs on the host's Python 3.8 or newer.
# ruff: noqa: UP031

from __future__ import annotations

import os
import stat

from fleetdeck.backend.host.lib import layout
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.host.purge.paths import (
    WalkError,
    close_fds,
    open_chain,
    scan,
    sha256_file,
    split_path,
)

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing is not imported at run time (8 ms on a host)
    from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple


def runs_losing_checkpoints(comps: List[str], ckpt_dirs: Sequence[str]) -> List[str]:
    """Runs that lose a checkpoint (the layout's `run_of`): from the path's own components,
    then from checkpoint folders found inside it."""
    runs = []
    for c in [comps] + [[x for x in d.split("/") if x] for d in ckpt_dirs]:
        run = layout.run_of(c)
        if run:
            runs.append("/" + "/".join(run))
    return sorted(set(runs))


def keeper_visitor(
    k: Dict[str, Any], index: Dict[Tuple[int, int], int]
) -> Callable[[str, str, os.stat_result], None]:
    """The `scan` visitor that records a keeper's files into `k`: each regular file's identity,
    a symlink inside it as its error, and whether any of it is an inode of what is purged."""

    def visit(path: str, name: str, st: os.stat_result) -> None:
        if (st.st_dev, st.st_ino) in index:
            k["in_purge"] = True
        if stat.S_ISLNK(st.st_mode):
            k["error"] = "%s inside it is a symlink" % shown(path)
        elif stat.S_ISREG(st.st_mode):
            k["files"].append(
                {
                    "path": path,
                    "bytes": st.st_size,
                    "dev": st.st_dev,
                    "ino": st.st_ino,
                    "nlink": st.st_nlink,
                    "mtime_ns": st.st_mtime_ns,
                    "sha256": None,
                }
            )

    return visit


def keeper_facts(run: str, index: Dict[Tuple[int, int], int], hashing: bool) -> Dict[str, Any]:
    """The run's final adapter as the layout defines it (`<run>/adapter/`, else the run root
    as HF's save_model leaves it), walked without following links: every kept file's identity
    and (when `hashing`) sha256, and whether any of it is an inode of what is purged."""
    where = layout.final_adapter(run)
    k: Dict[str, Any] = {
        "run": run,
        "adapter": where or run.rstrip("/") + "/" + layout.ADAPTER_DIR,
        "error": None,
        "files": [],
        "in_purge": False,
        "dir": None,
    }
    if where is None:
        k["error"] = layout.final_adapter_problem(run) or "no final adapter"
        return k
    try:
        parent, fd, pins = open_chain([c for c in where.split("/") if c])
    except WalkError as e:
        k["error"] = "%s: %s" % (shown(where), e.detail)
        return k
    try:
        k["dir"] = pins[-1]
        why = layout.adapter_problem_at(fd)  # judged again on the folder that is walked
        if why:
            k["error"] = "%s: %s" % (shown(where), why)
            return k
        k["in_purge"] = any(tuple(p) in index for p in pins)

        visit = keeper_visitor(k, index)

        if where == run:  # HF's root-level adapter: the two files are the keeper, not the run
            for name in (layout.WEIGHTS, layout.CONFIG):
                visit(
                    where.rstrip("/") + "/" + name,
                    name,
                    os.stat(name, dir_fd=fd, follow_symlinks=False),
                )
        else:
            scan(fd, where, visit)
        if hashing:
            for f in k["files"]:
                f["sha256"] = sha256_file(f["path"])
    except (OSError, WalkError) as e:
        k["error"] = "%s cannot be read: %s" % (shown(where), e)
    finally:
        close_fds(parent, fd)
    return k


def keep_newest(run_given: str, n: int, roots: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """The keep rule of a run without a final adapter: its checkpoints (layout's one rule),
    the newest `n` complete ones kept, the complete ones older than those to purge as literal
    paths; incomplete ones (a save killed half-way) are named and left where they are.
    {"run", "n", "checkpoints": [[step, path]], "incomplete": [[step, path, why]], "kept",
    "purge", "ignored": [[name, why]], "ambiguous": [[step, [path, ...]]] (two folders of one
    step: refused `ambiguous-step`), "error": [code, sentence]}."""
    out: Dict[str, Any] = {
        "given": run_given,
        "run": None,
        "n": n,
        "checkpoints": [],
        "incomplete": [],
        "ambiguous": [],
        "ignored": [],
        "kept": [],
        "purge": [],
        "error": None,
    }
    if not isinstance(run_given, str) or not run_given:
        out["error"] = ["bad-keep", "a keep rule names the run folder"]
        return out
    if roots is not None and not run_given.startswith(("/", "~")):
        # `run-6` as the README writes it: a name under a runs root, by the one rule
        try:
            run_given = layout.resolve_run(run_given, roots)
        except LookupError as e:
            out["error"] = list(e.args) if len(e.args) == 2 else ["no-run", str(e)]
            return out
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        out["error"] = ["bad-keep", "the number of checkpoints to keep must be 1 or more"]
        return out
    try:
        out["run"], comps = split_path(run_given)
        parent, fd, _ = open_chain(comps)
        close_fds(parent, fd)
    except WalkError as e:
        out["error"] = [e.code, "the run %s: %s" % (shown(run_given), e.detail)]
        return out
    found = sorted(layout.checkpoints(out["run"]), key=lambda c: (c[0], c[1]))
    out["checkpoints"] = [[step, path] for step, path in found]
    for base in (out["run"], out["run"].rstrip("/") + "/checkpoints"):
        try:
            out["ignored"] += [
                [base.rstrip("/") + "/" + name, why]
                for name, why in layout.odd_checkpoint_names(os.listdir(base))
            ]
        except OSError:
            pass
    complete = []
    for step, path in found:
        why = layout.checkpoint_problem(path)
        if why:
            out["incomplete"].append([step, path, why])
        else:
            complete.append((step, path))
    twins = _same_step(found)
    if not found:
        out["error"] = [
            "no-checkpoints",
            "%s holds no checkpoint-<step> folder (in it or in its "
            "checkpoints/)" % shown(out["run"]),
        ]
    elif twins:
        out["ambiguous"] = twins
        step, paths = twins[0]
        out["error"] = [
            "ambiguous-step",
            "%s holds %d checkpoints of step %d (%s): which is newer cannot be told; purge the "
            "one you do not want by its path first; nothing is deleted"
            % (shown(out["run"]), len(paths), step, " and ".join(shown(p) for p in paths))
            + ("" if len(twins) == 1 else " (and %d more steps like it)" % (len(twins) - 1)),
        ]
    elif len(complete) < n:
        out["error"] = [
            "no-keeper",
            "%s has %d complete checkpoint(s), fewer than the %d to keep%s; "
            "nothing is deleted" % (shown(out["run"]), len(complete), n, _incomplete_list(out)),
        ]
    elif len(complete) == n:
        out["error"] = [
            "nothing-to-free",
            "%s has %d complete checkpoint(s) and the newest %d are kept: "
            "nothing would be deleted%s"
            % (shown(out["run"]), len(complete), n, _incomplete_list(out)),
        ]
    else:
        out["kept"] = [path for _, path in complete[-n:]]
        out["purge"] = [path for _, path in complete[:-n]]
    return out


def _same_step(found: Sequence[Tuple[int, str]]) -> List[List[Any]]:
    """[[step, [path, ...]]] for each step that two checkpoint folders share (`<run>/checkpoint-300`
    beside `<run>/checkpoints/checkpoint-300`), oldest step first."""
    by_step: Dict[int, List[str]] = {}
    for step, path in found:
        by_step.setdefault(step, []).append(path)
    return [[s, sorted(ps)] for s, ps in sorted(by_step.items()) if len(ps) > 1]


def _incomplete_list(rule: Dict[str, Any]) -> str:
    """ "; incomplete (left alone): checkpoint-400 (trainer_state.json only), ..." or ""."""
    if not rule["incomplete"]:
        return ""
    return "; incomplete, left where they are: %s" % ", ".join(
        "%s (%s)"
        % (
            shown(path.rsplit("/", 1)[-1]),
            why[len("incomplete: ") :] if why.startswith("incomplete: ") else why,
        )
        for _, path, why in rule["incomplete"][:5]
    ) + (" and %d more" % (len(rule["incomplete"]) - 5) if len(rule["incomplete"]) > 5 else "")


def checkpoint_keeper_facts(
    run: str, kept: Sequence[str], index: Dict[Tuple[int, int], int], hashing: bool
) -> Dict[str, Any]:
    """The kept checkpoints of a run purged by the keep rule, in the shape of `keeper_facts`:
    every file in them (walked without following links), hashed when `hashing`, and whether
    any of it is an inode of what is purged. `dirs` pins each kept folder."""
    k: Dict[str, Any] = {
        "run": run,
        "adapter": ", ".join(shown(p) for p in kept),
        "error": None,
        "files": [],
        "in_purge": False,
        "dir": None,
        "dirs": [],
        "kind": "checkpoints",
    }
    for where in kept:
        try:
            parent, fd, pins = open_chain([c for c in where.split("/") if c])
        except WalkError as e:
            k["error"] = "%s: %s" % (shown(where), e.detail)
            return k
        try:
            k["dirs"].append(pins[-1])
            if any(tuple(p) in index for p in pins):
                k["in_purge"] = True
            why = layout.checkpoint_problem_at(fd)  # judged again on the folder that is walked
            if why:
                k["error"] = "%s is not a complete checkpoint (%s)" % (shown(where), why)
                return k
            scan(fd, where, keeper_visitor(k, index))
        except (OSError, WalkError) as e:
            k["error"] = "%s cannot be read: %s" % (shown(where), e)
        finally:
            close_fds(parent, fd)
        if k["error"]:
            return k
    if hashing:
        for f in k["files"]:
            f["sha256"] = sha256_file(f["path"])
    return k
