"""Run files the launch helper and its supervisor share (host side, stdlib + the host library):
run.json read and written atomically, train.log lines, the host's copy of RUN.toml, and the
verdict on the run a chain waits for."""
# Runs on the host's Python 3.8 or newer.

from __future__ import annotations

import json
import os
import time

from fleetdeck.backend.host.lib import layout, procfs

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing is not imported at run time (8 ms on a host)
    from typing import Any, Dict, Optional, Tuple


def read_manifest(run: str) -> Optional[Dict[str, Any]]:
    """run.json of `run` as a dict; {} when absent; None when unreadable."""
    try:
        with open(os.path.join(run, "run.json"), encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_manifest(run: str, manifest: Dict[str, Any], exclusive: bool = False) -> None:
    """Write run.json atomically; with `exclusive`, fail (FileExistsError) if one exists."""
    final = os.path.join(run, "run.json")
    tmp = os.path.join(run, f".run.json.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())
    try:
        if exclusive:
            # link() refuses an existing name: two launches into one folder cannot both win
            os.link(tmp, final)
            os.unlink(tmp)
        else:
            os.replace(tmp, final)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def record_state(run: str, manifest: Dict[str, Any], state: str, **extra: Any) -> None:
    """Append a state transition to `manifest` and write it."""
    manifest["state"] = state
    manifest.update(extra)
    manifest.setdefault("states", []).append(
        {"state": state, "time": time.time(), "pid": os.getpid()}
    )
    write_manifest(run, manifest)


def log_line(run: str, text: str) -> None:
    """One line in train.log, marked as the launcher's, not the trainer's."""
    line = "{} fleetdeck launch: {}\n".format(time.strftime("%Y-%m-%dT%H:%M:%S%z"), text)
    try:
        fd = os.open(os.path.join(run, "train.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode("utf-8", "replace"))
        finally:
            os.close(fd)
    except OSError:
        pass


def toml_value(v: object) -> str:
    """A TOML literal for a RUN.toml value (str, bool, int, float or a list of those)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if v != v or v in (float("inf"), float("-inf")):
            return {"nan": "nan", "inf": "inf", "-inf": "-inf"}[repr(v)]
        return repr(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    # a JSON string is a TOML basic string once DEL (allowed raw in JSON, not in TOML) is escaped
    return json.dumps(str(v), ensure_ascii=False).replace("\x7f", "\\u007f")


def toml_text(config: Dict[str, Any]) -> str:
    lines = ["# written by fleetdeck launch: the host's own copy, every path absolute"]
    for key in sorted(config):
        if config[key] is not None:
            lines.append(f"{key} = {toml_value(config[key])}")
    return "\n".join(lines) + "\n"


# -- the prerequisite of a chain -------------------------------------------------------------
def after_status(after: str) -> Tuple[str, str]:
    """(verdict, sentence) for the run a chain waits on: 'ready', 'wait' or 'never'. Ready
    means finished with a final adapter by the one layout rule (a real folder with non-empty
    weights and its config): a crashed or weightless save never fires the chain."""
    manifest = read_manifest(after)
    adapter = layout.final_adapter(after)
    if manifest is None:
        return "never", f"run {after} has an unreadable run.json"
    if not manifest:
        if not os.path.isdir(after):
            return "never", f"run {after} does not exist"
        if adapter:
            return "ready", f"run {after} has its final adapter ({adapter})"
        return "never", f"run {after} holds no run.json, so its end cannot be watched"
    state = manifest.get("state")
    why = manifest.get("error") or manifest.get("cancel_reason")
    if state == "finished":
        if adapter:
            return "ready", f"run {after} finished with its final adapter ({adapter})"
        return (
            "never",
            f"run {after} finished without a final adapter ({layout.final_adapter_problem(after)})",
        )
    if state in ("failed", "cancelled"):
        return "never", "run {} {}{}".format(after, state, f" ({why})" if why else "")
    if state == "running":
        if procfs.same_process(manifest.get("pid"), manifest.get("start_ticks")):
            return "wait", "run {} is running (pid {})".format(after, manifest.get("pid"))
        again = read_manifest(after) or {}
        if again.get("state") != "running":  # it ended between the two reads
            return after_status(after)
        if not isinstance(manifest.get("start_ticks"), int):
            return "never", (
                "run {} records pid {} without its start time, so it cannot be told from a "
                "reused pid; it cannot be waited for".format(after, manifest.get("pid"))
            )
        return "never", "run {} died without finishing (pid {} with its start time is gone)".format(
            after, manifest.get("pid")
        )
    if state == "queued":
        if procfs.same_process(manifest.get("waiter_pid"), manifest.get("waiter_start_ticks")):
            return "wait", f"run {after} is queued"
        again = read_manifest(after) or {}
        if again.get("state") != "queued":
            return after_status(after)
        return "never", "run {} is queued but its waiter (pid {}) is gone".format(
            after, manifest.get("waiter_pid")
        )
    return "never", f"run {after} is in state {state!r}"
