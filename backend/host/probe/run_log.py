"""What a trainer says as it runs, read from its log: the step, the total, the step time and the
loss between saves, and its last error line.

A Hugging Face Trainer started by hand writes no progress file: between two saves (25 steps at
this operator's pace: 8 to 16 minutes) its only voice is its output, usually redirected to a
file (`nohup python train.py > train.log`). That file is found through the process working in
the run (what its stdout and stderr point at, when a regular file under or beside the run), else
in the run folder (`train.log`, `nohup.out`, the newest `*.log`). Read from it:

- tqdm's counter, `72/159 [02:10<02:37,  1.81s/it]` (or `it/s`): the step, the total and the
  step time;
- the Trainer's log dicts, `{'loss': 2.31, 'grad_norm': ..., 'learning_rate': ..., 'epoch': 0.5}`
  (transformers 5 quotes each figure: `{'loss': '2.31', ...}`): the last loss (a regular
  expression, never an evaluation of the line);
- the last error line: a Traceback's closing exception, `CUDA out of memory`, `Killed`.

Bounded and incremental: at most TAIL bytes of a new file are read, then only what was appended
since the offset the resident probe keeps (a file replaced or truncated is read afresh); a line is
at most LINE bytes. The file's mtime is when the trainer was last heard.
"""
# Runs on the host's Python 3.8 or newer, bundled with the probe.

from __future__ import annotations

import os
import re
import stat
from collections.abc import Collection

from fleetdeck.backend.host.lib import flags
from fleetdeck.backend.host.lib.text import shown

TAIL = 64 * 1024
LINE = 4096
NAMES = ("train.log", "nohup.out")
_TQDM = re.compile(
    r"(?<![\d/])(\d{1,9})/(\d{1,9}) \[[^\]\n]{0,40}?,\s*([0-9]+(?:\.[0-9]+)?)(s/it|it/s)"
)
# transformers 5 writes each float as a quoted string (`{'loss': '2.312', ...}`); 4.x bare
_LOSS = re.compile(
    r"""^\s*\{['"]loss['"]:\s*['"]?([-+]?(?:[0-9.]+(?:[eE][-+]?\d+)?|nan|inf))['"]?[,}]"""
)
_ERROR = re.compile(
    r"(CUDA out of memory|OutOfMemoryError|^Killed\b|^\w*(?:Error|Exception)\b.*|"
    r"^Traceback \(most recent call last\))"
)
#: path -> [dev, ino, offset, facts, mtime when read to its end, the bytes before the offset]
_SEEN = {}  # type: dict
_SEEN_LIMIT = 4096


def _regular(path: str) -> os.stat_result | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st if stat.S_ISREG(st.st_mode) else None


def _beside(run: str, target: str) -> bool:
    """True when `target` lies in the run folder (at any depth) or directly in its parent (the
    runs root: `nohup python train.py > runs/run-8.log`), by path components, never a prefix."""
    if not target.startswith("/"):
        return False
    run = os.path.normpath(run)
    where = os.path.dirname(os.path.normpath(target))
    if where == os.path.dirname(run) and os.path.dirname(run) != "/":
        return True
    try:
        return os.path.commonpath([run, where]) == run
    except ValueError:
        return False


def find(run: str, names: Collection[str], pid: int | None) -> str | None:
    """The log a run's trainer writes: its stdout or stderr when that is a regular file in or
    beside the run folder, else train.log, nohup.out or the newest *.log in the run folder."""
    if pid:
        for fd in (1, 2):
            try:
                target = os.readlink("/proc/%d/fd/%d" % (pid, fd))
            except OSError:
                continue
            if _beside(run, target) and _regular(target) is not None:
                return target
    for n in NAMES:
        if n in names:
            p = os.path.join(run, n)
            if _regular(p) is not None:
                return p
    logs = []
    for n in names:
        if n.endswith(".log"):
            p = os.path.join(run, n)
            st = _regular(p)
            if st is not None:
                logs.append((st.st_mtime, p))
    return max(logs)[1] if logs else None


def _parse(text: str, facts: dict) -> None:
    """What `text` (newer than what `facts` holds) says, read from its end back: its last counter,
    its last loss, and an error line only when no progress came after it (a run that went on
    after an error is not judged by it). Stops as soon as the counter and the loss are found."""
    step = loss = error = None
    for line in reversed(re.split(r"[\r\n]", text)):
        if not line.strip():
            continue
        line = line[:LINE]
        if step is None and "/" in line:
            for m in reversed(list(_TQDM.finditer(line))):
                s, total = int(m.group(1)), int(m.group(2))
                if 0 < total and s <= total:
                    rate, unit = float(m.group(3)), m.group(4)
                    sps = (rate if unit == "s/it" else 1.0 / rate) if rate > 0 else None
                    step = (s, total, sps)
                    break
        if loss is None and "loss" in line:
            lm = _LOSS.match(line)
            if lm:
                try:
                    loss = float(lm.group(1))
                except ValueError:
                    pass
        if step is None and loss is None and error is None and _ERROR.search(line.strip()):
            error = shown(line.strip())[:300]
        if step is not None and loss is not None:
            break
    if step is not None:
        facts["step"], facts["max_steps"] = step[0], step[1]
        if step[2]:
            facts["sps"] = step[2]
        facts.pop("error", None)  # it went on after any error before this
    if loss is not None:
        facts["loss"], facts["loss_step"] = loss, facts.get("step")
    if error is not None:
        facts["error"] = error


def read(path: str) -> dict | None:
    """{"path", "mtime", "step", "max_steps", "sps", "loss", "loss_step", "error"} from the log
    at `path` (what is known of each), read incrementally; None when it cannot be read. A log
    unchanged since the last poll (device, inode, size and mtime) costs one stat."""
    seen = _SEEN.get(path)
    if seen is not None:
        try:
            st = os.stat(path)
        except OSError:
            return None
        if (
            stat.S_ISREG(st.st_mode)
            and (seen[0], seen[1]) == (st.st_dev, st.st_ino)
            and seen[2] == st.st_size
            and seen[4] == st.st_mtime
        ):
            return dict(seen[3], path=path, mtime=st.st_mtime)
    try:
        # never blocks on a FIFO swapped in after the stat, never follows a link
        fd = os.open(path, flags.READ_NOWAIT)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        seen = _SEEN.get(path)
        if (
            seen is None
            or seen[0] != st.st_dev
            or seen[1] != st.st_ino
            or st.st_size < seen[2]
            or (seen[5] and os.pread(fd, len(seen[5]), seen[2] - len(seen[5])) != seen[5])
        ):
            # new, replaced, truncated, or rewritten from its start (a trainer restarted into the
            # same log with `>`): the bytes before the kept offset are not the ones read there
            seen = [st.st_dev, st.st_ino, max(0, st.st_size - TAIL), {}, None, b""]
        start, facts = seen[2], dict(seen[3])
        if st.st_size > start:
            want = min(st.st_size - start, TAIL)
            start = st.st_size - want
            data = os.pread(fd, want, start)
            # a partial last line waits for its end (tqdm's \r updates end a line too)
            cut = max(data.rfind(b"\n"), data.rfind(b"\r"))
            if cut >= 0:
                _parse(data[: cut + 1].decode("utf-8", "replace"), facts)
                seen[2] = start + cut + 1
                seen[5] = data[max(0, cut + 1 - 64) : cut + 1]
            else:
                seen[2] = start
        seen[3] = facts
        # its mtime, when all of it was read (a partial last line waits for its end)
        seen[4] = st.st_mtime if seen[2] == st.st_size else None
        if len(_SEEN) >= _SEEN_LIMIT:
            _SEEN.clear()
        _SEEN[path] = seen
        return dict(facts, path=path, mtime=st.st_mtime)
    finally:
        os.close(fd)


def apply(r: dict, lg: dict | None, interval: float) -> float:
    """Step, total, s/step, loss and the last heard time from the log, where it is newer than
    what the run's files say. Returns the steps between updates (1 when the log counts)."""
    if not lg:
        return interval
    newer = r["step"] is None or (lg.get("step") is not None and lg["step"] > r["step"])
    if lg.get("step") is not None and newer:
        r["step"] = lg["step"]
        if not r["max_steps"]:
            r["max_steps"] = lg.get("max_steps")
        if lg.get("sps"):
            r["seconds_per_step"] = round(lg["sps"], 4)
            r["last_seconds_per_step"] = round(lg["sps"], 4)
        if lg.get("loss") is not None and lg.get("loss_step") is not None:
            r["loss"] = lg["loss"]
        interval = 1
    elif lg.get("step") is not None and r["step"] == lg["step"] and lg.get("sps"):
        interval = 1
    if r["last_update"] is None or lg["mtime"] > r["last_update"]:
        r["last_update"] = lg["mtime"]
    r["log"] = lg["path"]
    return interval


__all__ = ["apply", "find", "read"]
