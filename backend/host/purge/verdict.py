"""Purge's verdict: gathered facts judged (pure), so the controller and the host judge with
the same code: per path its refusals and checks, and warnings for the whole purge."""
# Runs on the host's Python 3.8 or newer.
# ruff: noqa: UP031

from __future__ import annotations

from fleetdeck.backend.host.lib import fsinfo, layout
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.host.purge.paths import WALK_CODES

CHECKS = WALK_CODES + ("overlapping", "outside-roots", "is-root", "holds-final-adapter", "in-use",
                       "container-mount", "container-unknown", "mounted", "no-keeper", "no-witness",
                                                    "best-eval")


def _below_root(abs_path, roots):
    top = next((r for r in roots if fsinfo.under(abs_path, r)), "/")
    return [c for c in abs_path[len(top.rstrip("/")):].split("/") if c]


def _is_final_adapter(abs_path, roots, holds_weights=False):
    """True when abs_path is or lies in a run's final adapter: an `adapter` component below the
    purge root, or (`holds_weights`) a folder holding the weights, with no checkpoint component
    before it."""
    for c in _below_root(abs_path, roots):
        if c == "checkpoints" or layout.checkpoint_step(c) is not None:
            return False
        if c == layout.ADAPTER_DIR:
            return True
    return holds_weights


def evaluate(facts):
    """Judge gathered facts (pure): per path, the refusals [[code, sentence]] and checks
    {code: pass|fail|skipped}; plus warnings for the whole purge."""
    roots = [r["resolved"] for r in facts["roots"] if not r.get("refused")]
    warnings, out = [], []
    for r in facts["roots"]:
        if r.get("refused"):
            warnings.append("purge root %s is not used: %s" % (shown(r["given"]), r["refused"]))
    keepers = {k["run"]: k for k in facts["keepers"]}
    docker = facts.get("docker") or {"state": "absent"}
    if docker["state"] == "down":
        warnings.append("docker is installed but its engine is not running (%s): no container runs "
                        "now, stopped containers could not be inspected" % shown(docker.get("error")))
    rule = facts.get("keep") if isinstance(facts.get("keep"), dict) else {}
    for _step, path, why in rule.get("incomplete") or []:
        warnings.append("%s is %s; it is neither kept nor deleted" % (shown(path), why))
    for path, why in rule.get("ignored") or []:
        warnings.append("%s is not counted as a checkpoint (%s); it is neither kept nor deleted" % (
            shown(path), why))
    for u in facts["proc_unreadable"]:
        if u["ancestor"]:
            # it started this check and waits on it (init, sshd, the controller): reported, not counted
            warnings.append("process %d (%s) cannot be read (%s); it is an ancestor of this check, so it "
                            "is not counted as a user of the paths" % (u["pid"], shown(u["comm"]), shown(u["error"])))
    for n, p in enumerate(facts["paths"]):
        ref = []
        if p["error"]:
            ref.append(p["error"])
            out.append({"refusals": ref, "checks": _checks(ref, skipped=True)})
            continue
        a = p["abs"]
        other = next((q["abs"] for m, q in enumerate(facts["paths"]) if m != n and q["abs"] and
                      (q["abs"] == a and m < n or fsinfo.under(a, q["abs"]) and q["abs"] != a)), None)
        if other:
            ref.append(["overlapping", "it is the same as, or lies inside, %s, also listed; list each folder "
                        "once" % shown(other)])
        if p["scan_error"]:
            ref.append(["unreadable", "part of it cannot be read (%s), so it cannot be checked" % p["scan_error"]])
        if a in roots:
            ref.append(["is-root", "it is the purge root itself; only folders inside a root can be purged"])
        elif not any(fsinfo.under(a, r) for r in roots):
            ref.append(["outside-roots", "it is outside every purge root (%s)" % (", ".join(
                "%s -> %s%s" % (shown(r["given"]), shown(r["resolved"]), " (a system folder: not used)"
                                if r.get("refused") else "") for r in facts["roots"]) or "none set")])
        if p.get("outside"):
            # never walked: the checks that read its contents were not made
            out.append({"refusals": ref, "checks": _checks(ref, skipped=True)})
            continue
        adapters = [x for x in [a] + p["adapters"] if _is_final_adapter(x, roots)] + \
            [x for x in p.get("weights_dirs", []) if _is_final_adapter(x, roots, holds_weights=True)]
        if adapters:
            ref.append(["holds-final-adapter", "it is or holds a run's final adapter (%s)" % shown(adapters[0])])
        held = [h for h in facts["holders"] if h["index"] == n]
        blind = [u for u in facts["proc_unreadable"] if not u["ancestor"]]
        if held:
            ref.append(["in-use", "in use: " + "; ".join("pid %d (%s) %s %s" % (
                h["pid"], shown(h["comm"]), {"fd": "has open", "maps": "maps", "cwd": "has its cwd in",
                                             "root": "has its root in"}[h["how"]], shown(h["file"] or "?"))
                for h in held[:3]) + (" and %d more" % (len(held) - 3) if len(held) > 3 else "")])
        elif blind:
            ref.append(["in-use", "cannot tell whether it is in use: %d process(es) cannot be read (%s); run "
                        "as a user who can read every /proc entry" % (len(blind), shown(blind[0]["error"]))])
        if p["containers"]:
            c = p["containers"][0]
            ref.append(["container-mount", "container %s (%s) mounts %s at %s" % (
                shown(c["name"] or c["id"]), "running" if c["running"] else "stopped", shown(c["source"]),
                shown(c["destination"] or "?"))])
        if docker["state"] in ("denied", "error"):
            ref.append(["container-unknown", "docker is installed but could not be asked which containers "
                        "mount it (%s)" % shown(docker.get("error") or "")])
        if p["mounts_inside"]:
            ref.append(["mounted", "a filesystem is mounted at %s" % shown(p["mounts_inside"][0])])
        for run in p["runs"]:
            k = keepers.get(run)
            why = None
            if k is None or k["error"]:
                why = k["error"] if k else "it was not examined"
            elif k["in_purge"]:
                why = "%s is, or shares a file or folder (hard link, bind mount) with, what is purged" % \
                    shown(k["adapter"])
            elif not k["files"]:
                why = "%s holds no file to hash before and after, so nothing would witness it" % shown(k["adapter"])
            if why and k is not None and k.get("kind") == "checkpoints":
                ref.append(["no-keeper", "run %s keeps its newest checkpoints (%s), but they cannot be "
                            "kept safely: %s" % (shown(run), k["adapter"], why)])
                break
            if why:
                ref.append(["no-keeper", "run %s loses a checkpoint but has no final adapter that survives "
                            "it (a real folder with non-empty %s and %s): %s; --keep-newest N keeps its "
                            "newest checkpoints instead" % (shown(run), layout.WEIGHTS, layout.CONFIG, why)])
                break
        if not p["runs"] and not p.get("scan_error"):
            ref.append(["no-witness", "it holds no checkpoint of a run (no checkpoint-<step> folder in it or "
                        "above it), so no kept adapter or checkpoint would be hashed before and after to "
                        "witness this purge; purge deletes checkpoints"])
        allowed = facts.get("allow_best") or []
        for e in facts.get("evals") or []:
            if e["best_kept"] is False and n in e["best_in"] and e["best"] not in allowed:
                ref.append(["best-eval", "it holds %s, the best eval loss of run %s (%.4g), and what the run keeps "
                            "is not that checkpoint (no kept checkpoint or final adapter holds the same weights); "
                            "to delete it anyway, type its path with --allow-best" % (
                                shown(e["best"]), shown(e["run"]), e["best_loss"])])
                break
        if p["symlinks"]:
            warnings.append("%s holds %d symlink(s); they are removed, never followed" % (shown(a), p["symlinks"]))
        z = p["zfs"]
        if z and z.get("error"):
            warnings.append("%s is on ZFS but snapshots could not be read (%s)" % (shown(a), shown(z["error"])))
        elif z and (z.get("usedbysnapshots") or z.get("snapshots")):
            warnings.append("%s is on ZFS dataset %s with %s snapshot(s) (usedbysnapshots %d bytes): blocks they "
                            "reference stay allocated until the snapshots are destroyed" % (
                                shown(a), shown(z["dataset"]), z.get("snapshots"), z.get("usedbysnapshots", 0)))
        out.append({"refusals": ref, "checks": _checks(ref)})
    for k in facts["keepers"]:
        for f in k["files"]:
            if f["nlink"] > 1 and not k["in_purge"]:
                warnings.append("kept file %s has %d hard links elsewhere" % (shown(f["path"]), f["nlink"]))
    return {"paths": out, "warnings": warnings}


def _checks(ref, skipped=False):
    failed = {r[0] for r in ref}
    return {c: "fail" if c in failed else ("skipped" if skipped else "pass") for c in CHECKS}
