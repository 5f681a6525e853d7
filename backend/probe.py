"""fleetdeck's host probe: one stdlib-only module (Python 3.8+) that answers with a JSON snapshot.

Sent to each host by the poller and run there as `python3 -c BOOT --resident` (or locally as a
subprocess). Resident mode reads one JSON request per line on stdin and writes one JSON reply per
line on stdout until EOF, so NVML is initialised once and file parses are cached between polls.
One-shot: `python3 probe.py REQUEST_JSON`, `python3 - REQUEST_JSON < probe.py`, or the request as
JSON on stdin. In-process: `snapshot(request) -> dict`.

Request: {"op": "snapshot", "runs": [...], "disk_paths": [...], "stall_factor": 10,
"fresh": false, "gpu": "auto" | "nvml" | "nvidia-smi" | "none"} or {"op": "ping"}.
Every section is guarded on its own: a failure becomes a line in `warnings`, never a crash.
"""

from __future__ import annotations

import csv
import ctypes
import hashlib
import json
import math
import os
import pwd
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from datetime import datetime, timedelta

SELF_MARK = "fleetdeck"            # processes never listed as loops (our CLI, our helpers)
HELPER_MARK = "fleetdeck-helper"   # our helpers (mirror, purge) never make a run "running"
SHELLS = {"bash", "sh", "dash", "zsh", "ksh", "mksh", "fish", "tcsh", "csh", "busybox"}
# A shell, pager, editor or copier sitting in a run folder is an operator looking, not training.
BYSTANDERS = SHELLS | {"less", "more", "tail", "head", "cat", "vi", "vim", "nvim", "nano", "emacs",
                       "du", "ls", "watch", "rsync", "scp", "sftp-server", "sha256sum", "md5sum",
                       "tar", "find", "sleep", "top", "htop", "nvtop", "tmux", "screen", "ssh", "sshd",
                       "git", "cp", "mv", "rm"}
LOOPY = SHELLS | {"watch", "sleep"}
FD_SCAN_EVERY = 20.0   # s; a full /proc/*/fd walk is the one costly scan, so it is throttled
TIMER_TTL = 30.0       # s; systemd timer listings are re-read at most this often
MIN_STALL_S = 120.0
SYSTEMD_BOOTED = "/run/systemd/system"   # sd_booted(3): present only when systemd is PID 1
MAX_LOSS_POINTS = 2000  # the train-loss series is cut to its newest points; eval series are kept
LOOP_RE = re.compile(r"(?:^|[\s;&|(])(?:while\s+(?:true|:|\[\s*1\s*\])|until\s+false)(?=\s|;|$)")
CRON_RE = re.compile(r"^\s*(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(.*)$")
ENV_RE = re.compile(r"^\s*[A-Za-z_][A-Za-z0-9_]*\s*=")
CRON_D_NAME = re.compile(r"^[A-Za-z0-9_-]+$")   # run-parts' rule; cron skips other names
CKPT_RE = re.compile(r"^checkpoint-(\d+)$")

_CACHE = {}   # (tag, path) -> (stat key, value); file parses survive between resident polls
_STATE = {"fd_scan_at": 0.0, "holders": {}, "nvml": None, "nvml_error": None, "nvml_retry": 0.0}
_USERS = {}


# -- small helpers ----------------------------------------------------------------------------
def _read(path, limit=-1):
    with open(path, "rb") as f:
        return f.read(limit).decode("utf-8", "surrogateescape")


def _skey(st):
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def _cached(tag, path, parse, st=None):
    """parse(path), re-run only when the file's (mtime, size, inode) changed."""
    st = st or os.stat(path)
    hit = _CACHE.get((tag, path))
    if hit is not None and hit[0] == _skey(st):
        return hit[1]
    val = parse(path)
    _CACHE[(tag, path)] = (_skey(st), val)
    return val


def _user(uid):
    if uid not in _USERS:
        try:
            _USERS[uid] = pwd.getpwuid(uid).pw_name
        except KeyError:
            _USERS[uid] = str(uid)
    return _USERS[uid]


def _me():
    return _user(os.geteuid())


def _run(argv, timeout=10):
    """(rc, stdout, stderr) of a fixed argv; rc None when the program does not exist."""
    env = dict(os.environ, LC_ALL="C", LANG="C", SYSTEMD_PAGER="", SYSTEMD_COLORS="0")
    try:
        p = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                           env=env, timeout=timeout)
    except FileNotFoundError:
        return None, "", ""
    return (p.returncode, p.stdout.decode("utf-8", "surrogateescape"),
            p.stderr.decode("utf-8", "replace").strip())


def _sid(prefix, *parts):
    return prefix + hashlib.sha1("|".join(str(p) for p in parts).encode("utf-8", "surrogateescape")).hexdigest()[:10]


def _finite(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _iso(ts):
    return datetime.fromtimestamp(ts).astimezone().isoformat(timespec="seconds")


# -- processes ----------------------------------------------------------------------------------
def _proc_read(path):
    """A /proc file's text, with raw os calls: the process scan opens hundreds of them a poll."""
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = [os.read(fd, 65536)]
        while len(chunks[-1]) == 65536:
            chunks.append(os.read(fd, 65536))
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8", "surrogateescape")


class Procs:
    """One look at /proc: argv of every process, minus the probe and its parent chain."""

    def __init__(self):
        self.me = os.getpid()
        self.raw, self.prog, self.marked = {}, {}, set()
        self._argv = {}
        self._stat = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    raw = _proc_read(f"/proc/{name}/cmdline")
                except OSError:
                    continue
                if raw:
                    pid = int(name)
                    self.raw[pid] = raw
                    self.prog[pid] = raw.partition("\0")[0].rpartition("/")[2].lstrip("-")
                    if SELF_MARK in raw:
                        self.marked.add(pid)
        self.skip = {self.me}
        pid = self.me
        while pid > 1:
            pid = self.ppid(pid) or 0
            self.skip.add(pid)

    def stat(self, pid):
        """(ppid, start ticks, state) from /proc/PID/stat, or None when gone."""
        if pid not in self._stat:
            try:
                s = _proc_read(f"/proc/{pid}/stat")
                rest = s[s.rfind(")") + 2:].split()
                self._stat[pid] = (int(rest[1]), int(rest[19]), rest[0])
            except (OSError, IndexError, ValueError):
                self._stat[pid] = None
        return self._stat[pid]

    def ppid(self, pid):
        st = self.stat(pid)
        return st[0] if st else None

    def uid(self, pid):
        try:
            return os.stat(f"/proc/{pid}").st_uid
        except OSError:
            return None

    def argv(self, pid):
        """The argv of `pid` (empty when unknown)."""
        if pid not in self._argv:
            raw = self.raw.get(pid, "")
            self._argv[pid] = (raw[:-1] if raw.endswith("\0") else raw).split("\0") if raw else []
        return self._argv[pid]

    def others(self):
        """Every pid that is not the probe or one of its ancestors."""
        return [p for p in self.raw if p not in self.skip]

    def alive(self, pid, start=None):
        st = self.stat(pid) if isinstance(pid, int) and pid > 0 else None
        return st is not None and st[2] not in "ZX" and (start is None or st[1] == start)

    def command(self, pid):
        return " ".join(self.argv(pid))[:300]


# -- memory, load, disks ------------------------------------------------------------------------
def _meminfo():
    info = {}
    for line in _read("/proc/meminfo").splitlines():
        k, _, v = line.partition(":")
        parts = v.split()
        if parts and parts[0].isdigit():
            info[k] = int(parts[0]) * 1024
    return info


def memory():
    """System memory: total, and used as MemTotal - MemAvailable."""
    try:
        m = _meminfo()
        return {"total_bytes": m["MemTotal"], "used_bytes": m["MemTotal"] - m.get("MemAvailable", m.get("MemFree", 0))}
    except (OSError, KeyError):
        import psutil  # only off Linux; ImportError lands in warnings
        v = psutil.virtual_memory()
        return {"total_bytes": v.total, "used_bytes": v.total - v.available}


def load1():
    """The 1-minute load average."""
    try:
        return float(_read("/proc/loadavg").split()[0])
    except (OSError, IndexError, ValueError):
        return os.getloadavg()[0]


def _unescape_mount(s):
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), s)


def disks(paths):
    """The filesystem behind each configured folder (nearest existing parent if it is missing)."""
    mounts = []
    for line in _read("/proc/self/mountinfo").splitlines():
        left, _, right = line.partition(" - ")
        f = left.split()
        if len(f) >= 5 and right:
            mounts.append((_unescape_mount(f[4]), right.split()[0]))
    out, seen = [], set()
    for p in paths:
        if p in seen:
            continue
        seen.add(p)
        d = {"path": p, "mount": "", "fstype": "", "total_bytes": 0, "used_bytes": 0, "free_bytes": 0,
             "error": None}
        out.append(d)
        try:
            real = os.path.realpath(os.path.expanduser(p))
            probe_at = real
            while not os.path.exists(probe_at) and probe_at != "/":
                probe_at = os.path.dirname(probe_at)
            if probe_at != real:
                d["error"] = f"does not exist (figures for {probe_at})"
            best = ("/", "")
            for mnt, fstype in mounts:   # later mounts hide earlier ones on the same point
                if (probe_at == mnt or probe_at.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best[0]):
                    best = (mnt, fstype)
            s = os.statvfs(probe_at)
            d.update(mount=best[0], fstype=best[1], total_bytes=s.f_blocks * s.f_frsize,
                     used_bytes=(s.f_blocks - s.f_bfree) * s.f_frsize, free_bytes=s.f_bavail * s.f_frsize)
        except OSError as e:
            d["error"] = f"{p}: {e.strerror or e}"
    return out


# -- GPUs ---------------------------------------------------------------------------------------
class _Mem(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class _MemV2(ctypes.Structure):
    # nvmlMemory_v2_t: `used` excludes the driver's reservation, as nvidia-smi reports it
    _fields_ = [("version", ctypes.c_uint), ("total", ctypes.c_ulonglong), ("reserved", ctypes.c_ulonglong),
                ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


NVML_MEMORY_V2 = ctypes.sizeof(_MemV2) | (2 << 24)


class _Util(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class _ProcV2(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]


class _ProcV1(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]


NVML_NOT_SUPPORTED, NVML_INSUFFICIENT_SIZE = 3, 7
NVML_NA = 0xFFFFFFFFFFFFFFFF


class Nvml:
    """libnvidia-ml.so.1 through ctypes: initialised once, device handles and names cached."""

    def __init__(self):
        self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        self.lib.nvmlErrorString.restype = ctypes.c_char_p
        self._check(self.lib.nvmlInit_v2(), "nvmlInit")
        n = ctypes.c_uint()
        self._check(self.lib.nvmlDeviceGetCount_v2(ctypes.byref(n)), "nvmlDeviceGetCount")
        self.devices = []
        for i in range(n.value):
            h = ctypes.c_void_p()
            self._check(self.lib.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h)), "nvmlDeviceGetHandleByIndex")
            name, uuid = ctypes.create_string_buffer(96), ctypes.create_string_buffer(96)
            self.lib.nvmlDeviceGetName(h, name, 96)
            self.lib.nvmlDeviceGetUUID(h, uuid, 96)
            self.devices.append((i, h, name.value.decode(errors="replace"), uuid.value.decode(errors="replace")))
        self._mem_v2 = hasattr(self.lib, "nvmlDeviceGetMemoryInfo_v2")
        for sym, struct in (("nvmlDeviceGetComputeRunningProcesses_v3", _ProcV2),
                            ("nvmlDeviceGetComputeRunningProcesses_v2", _ProcV2),
                            ("nvmlDeviceGetComputeRunningProcesses", _ProcV1)):
            if hasattr(self.lib, sym):
                self._procs_fn, self._proc_struct = getattr(self.lib, sym), struct
                break

    def _check(self, rc, what):
        if rc != 0:
            raise OSError("{}: {}".format(what, self.lib.nvmlErrorString(rc).decode(errors="replace")))

    def read(self):
        """[(index, name, uuid, total_bytes|None, used_bytes|None, util|None, [(pid, bytes|None)])]."""
        out, self.notes = [], []
        for i, h, name, uuid in self.devices:
            m = None
            if self._mem_v2:
                m = _MemV2(version=NVML_MEMORY_V2)
                rc = self.lib.nvmlDeviceGetMemoryInfo_v2(h, ctypes.byref(m))
                if rc not in (0, NVML_NOT_SUPPORTED):
                    m = None   # an older driver without the v2 struct: ask the v1 way
            if m is None:
                m = _Mem()
                rc = self.lib.nvmlDeviceGetMemoryInfo(h, ctypes.byref(m))
            if rc not in (0, NVML_NOT_SUPPORTED):
                self._check(rc, "nvmlDeviceGetMemoryInfo")
            u = _Util()
            util = u.gpu if self.lib.nvmlDeviceGetUtilizationRates(h, ctypes.byref(u)) == 0 else None
            known = rc == 0 and m.total > 0   # GB10: "Not Supported", or zeros on some drivers
            try:
                plist = self._procs(h)
            except OSError as e:   # e.g. a MIG parent: the device still counts, its processes unknown
                plist = []
                self.notes.append(f"GPU{i} processes: {e}")
            out.append((i, name, uuid, m.total if known else None, m.used if known else None, util, plist))
        return out

    def _procs(self, h):
        count = ctypes.c_uint(0)
        rc = self._procs_fn(h, ctypes.byref(count), None)
        if rc == 0:
            return []
        if rc != NVML_INSUFFICIENT_SIZE:
            self._check(rc, "nvmlDeviceGetComputeRunningProcesses")
        n = count.value + 8   # processes may start between the two calls
        buf = (self._proc_struct * n)()
        count = ctypes.c_uint(n)
        self._check(self._procs_fn(h, ctypes.byref(count), buf), "nvmlDeviceGetComputeRunningProcesses")
        return [(p.pid, None if p.usedGpuMemory in (NVML_NA, 0) else p.usedGpuMemory) for p in buf[:count.value]]


def _smi_num(s):
    try:
        return float(s)
    except ValueError:
        return None   # "[N/A]", "[Not Supported]"


def _smi():
    if shutil.which("nvidia-smi") is None:
        return None
    q = "index,name,uuid,memory.total,memory.used,utilization.gpu"
    rc, out, err = _run(["nvidia-smi", "--query-gpu=" + q, "--format=csv,noheader,nounits"])
    if rc is None:
        return None
    if rc != 0:
        raise OSError("nvidia-smi failed: {}".format(((err or out).strip().splitlines() or [f"exit {rc}"])[-1]))
    rc2, apps, err2 = _run(["nvidia-smi", "--query-compute-apps=gpu_uuid,pid,used_memory",
                            "--format=csv,noheader,nounits"])
    per = {}
    for row in csv.reader((apps if rc2 == 0 else "").splitlines(), skipinitialspace=True):
        if len(row) >= 3 and row[1].strip().isdigit():
            mib = _smi_num(row[2])
            per.setdefault(row[0].strip(), []).append((int(row[1]), None if not mib else mib * 2 ** 20))
    res = []
    for row in csv.reader(out.splitlines(), skipinitialspace=True):
        if len(row) < 6:
            continue
        tot, used, util = _smi_num(row[3]), _smi_num(row[4]), _smi_num(row[5])
        res.append((int(row[0]), row[1].strip(), row[2].strip(), None if tot is None else tot * 2 ** 20,
                    None if used is None else used * 2 ** 20, util, per.get(row[2].strip(), [])))
    return res


def _rss(pid):
    try:
        for line in _read(f"/proc/{pid}/status").splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def gpus(mode, procs, warnings):
    """(gpu list, source): NVML, else nvidia-smi, else none (with a warning saying why)."""
    raw, source, why = None, None, []
    if mode in ("auto", "nvml"):
        try:
            if _STATE["nvml"] is None and time.time() >= _STATE["nvml_retry"]:
                _STATE["nvml"] = Nvml()
            if _STATE["nvml"] is not None:
                raw, source = _STATE["nvml"].read(), "nvml"
                warnings.extend(_STATE["nvml"].notes)
            else:
                why.append(_STATE["nvml_error"])
        except (OSError, AttributeError) as e:
            _STATE["nvml"], _STATE["nvml_error"] = None, f"NVML: {e}"
            _STATE["nvml_retry"] = time.time() + 60   # a host without the driver stays without it
            why.append(_STATE["nvml_error"])
    if raw is None and mode in ("auto", "nvidia-smi"):
        try:
            raw = _smi()
            if raw is None:
                why.append("nvidia-smi not found")
            else:
                source = "nvidia-smi"
        except OSError as e:
            why.append(str(e))
    if raw is None:
        if mode != "none":
            no_driver = "nvidia-smi not found" in why and all("cannot open shared object" in w or
                                                               w == "nvidia-smi not found" for w in why if w)
            # a CPU-only host is normal: say so plainly; anything else keeps the driver's words
            warnings.append("no NVIDIA driver on this host (no libnvidia-ml, no nvidia-smi): no GPUs"
                            if no_driver else "no GPUs reported: " + "; ".join(w for w in why if w))
        return [], None
    mem = None
    out = []
    for index, name, uuid, total, used, util, plist in raw:
        unified = total is None
        if unified:   # GB10-style: the driver has no memory figures; the system's are the GPU's
            mem = mem or _meminfo()
            total, used = mem["MemTotal"], mem["MemTotal"] - mem.get("MemAvailable", 0)
        ps = []
        for pid, b in plist:
            uid = procs.uid(pid)
            ps.append({"pid": pid, "user": "" if uid is None else _user(uid),
                       "used_mib": round((b if b is not None else _rss(pid)) / 2 ** 20, 1),
                       "command": procs.command(pid)})
        out.append({"index": index, "name": name, "uuid": uuid, "unified_memory": unified,
                    "memory_total_mib": round(total / 2 ** 20, 1), "memory_used_mib": round(used / 2 ** 20, 1),
                    "utilization_pct": util, "processes": ps})
    return out, source


# -- runs ---------------------------------------------------------------------------------------
def _progress(path):
    """progress.jsonl, parsed incrementally: only bytes appended since the last poll are read."""
    st = os.stat(path)
    c = _CACHE.get(("progress", path))
    if c is not None and c[0] == _skey(st):
        return c[1]
    p = c[1] if c is not None and c[1]["ino"] == st.st_ino and st.st_size >= c[1]["offset"] else None
    if p is None:
        p = {"ino": st.st_ino, "offset": 0, "lineno": 0, "step": None, "max_steps": None, "loss": None,
             "eval_loss": None, "losses": [], "eval_losses": [], "sps": None, "times": [], "error": None,
             "nonfinite": None}
    else:
        p = dict(p, losses=list(p["losses"]), eval_losses=list(p["eval_losses"]), times=list(p["times"]))
    with open(path, "rb") as f:
        f.seek(p["offset"])
        data = f.read()
    lines = data.split(b"\n")
    torn = lines.pop()   # bytes after the last newline: a line still being written
    for i, raw in enumerate(lines):
        try:
            obj = json.loads(raw.decode("utf-8")) if raw.strip() else {}
            if not isinstance(obj, dict):
                raise ValueError("not an object")
        except ValueError:
            if i == len(lines) - 1 and not torn:
                break   # a torn last line: read it again next poll, when more may follow it
            p["error"] = p["error"] or f"progress.jsonl line {p['lineno'] + 1} is not a JSON object"
            obj = {}
        p["lineno"] += 1
        p["offset"] += len(raw) + 1
        _progress_line(p, obj)
    _CACHE[("progress", path)] = (_skey(st), p)
    return p


def _progress_line(p, obj):
    step = obj.get("step")
    step = int(step) if _finite(step) else None
    if step is not None:
        p["step"] = step if p["step"] is None else max(p["step"], step)
    if _finite(obj.get("max_steps")):
        p["max_steps"] = int(obj["max_steps"])
    for key, series in (("loss", "losses"), ("eval_loss", "eval_losses")):
        v = obj.get(key)
        if v is None or isinstance(v, bool):
            continue
        if _finite(v):
            p[key] = float(v)
            if step is not None:
                p[series].append([step, float(v)])
        elif isinstance(v, float):
            p["nonfinite"] = f"{key} is {v} at step {step}"
    if _finite(obj.get("seconds_per_step")) and obj["seconds_per_step"] > 0:
        p["sps"] = float(obj["seconds_per_step"])
    if step is not None and _finite(obj.get("time")):
        p["times"] = (p["times"] + [[step, float(obj["time"])]])[-2:]
    if len(p["losses"]) > 2 * MAX_LOSS_POINTS:
        p["losses"] = p["losses"][-MAX_LOSS_POINTS:]


def _trainer_state(path):
    """Hugging Face Trainer's trainer_state.json: step, max_steps and the loss series."""
    try:
        d = json.loads(_read(path))
        if not isinstance(d, dict) or not isinstance(d.get("log_history", []), list):
            raise ValueError("not a trainer state object")
    except ValueError as e:
        return {"error": f"{path} is not valid JSON (truncated?): {str(e)[:80]}"}
    p = {"step": None, "max_steps": None, "loss": None, "eval_loss": None, "losses": [], "eval_losses": [],
         "sps": None, "error": None, "nonfinite": None,
         "save_steps": d.get("save_steps") if _finite(d.get("save_steps")) else None}
    for e in d.get("log_history") or []:
        if isinstance(e, dict):
            _progress_line(p, {k: e.get(k) for k in ("step", "loss", "eval_loss")})
    if _finite(d.get("global_step")):
        p["step"] = int(d["global_step"])
    if _finite(d.get("max_steps")):
        p["max_steps"] = int(d["max_steps"])
    return p


def _dir_bytes(path):
    total = 0
    stack = [path]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for e in it:
                    if e.is_dir(follow_symlinks=False):
                        stack.append(e.path)
                    else:
                        total += e.stat(follow_symlinks=False).st_size
        except OSError:
            pass
    return total


def _ckpt_bytes(path, now):
    st = os.lstat(path)
    hit = _CACHE.get(("ckpt", path))
    if hit is not None and hit[0] == st.st_mtime_ns:
        return hit[1]
    b = _dir_bytes(path)
    if now - st.st_mtime > 120:   # a checkpoint still being written is summed again next poll
        _CACHE[("ckpt", path)] = (st.st_mtime_ns, b)
    return b


def _checkpoints(run, names):
    found = []
    for base, listing in ((run, names), (os.path.join(run, "checkpoints"), None)):
        if listing is None:
            if "checkpoints" not in names:
                continue
            try:
                listing = os.listdir(base)
            except OSError:
                continue
        for n in listing:
            m = CKPT_RE.match(n)
            p = os.path.join(base, n)
            if m and os.path.isdir(p) and not os.path.islink(p):
                found.append((int(m.group(1)), p))
    return sorted(found)


def _is_run(names):
    return bool(names & {"run.json", "trainer_state.json", "checkpoints", "adapter", "progress.jsonl"}) or any(
        CKPT_RE.match(n) for n in names)


def _start_ticks(rj):
    for k in ("start_ticks", "pid_start_time"):
        if isinstance(rj.get(k), int) and not isinstance(rj.get(k), bool):
            return rj[k]
    return None


def _run_facts(path, names, now):
    """Everything about one run that its files say (the processes come later)."""
    r = {"path": path, "name": os.path.basename(path), "state": "unknown", "pid": None, "step": None,
         "max_steps": None, "loss": None, "eval_loss": None, "losses": [], "eval_losses": [],
         "seconds_per_step": None, "eta_seconds": None, "adapter": None, "checkpoints": [], "reason": None,
         "last_update": None}
    rj, problems, interval = {}, [], 1
    if "run.json" in names:
        try:
            rj = _cached("json", os.path.join(path, "run.json"), lambda p: json.loads(_read(p)))
            if not isinstance(rj, dict):
                rj, _ = {}, problems.append("run.json is not a JSON object")
        except (ValueError, OSError) as e:
            problems.append(f"run.json unreadable: {str(e)[:80]}")
    cks = _checkpoints(path, names)
    r["checkpoints"] = [{"path": p, "step": s, "bytes": _ckpt_bytes(p, now)} for s, p in cks]
    for fn in ("adapter_model.safetensors", "adapter_model.bin"):
        if os.path.isfile(os.path.join(path, "adapter", fn)):
            r["adapter"] = os.path.join(path, "adapter")
    prog, src = None, None
    if "progress.jsonl" in names:
        src = os.path.join(path, "progress.jsonl")
        prog = _progress(src)
    else:
        states = [(s, os.path.join(p, "trainer_state.json")) for s, p in cks]
        states = [x for x in states if os.path.isfile(x[1])]
        top = os.path.join(path, "trainer_state.json")
        if "trainer_state.json" in names and (not states or os.stat(top).st_mtime >= os.stat(states[-1][1]).st_mtime):
            states.append((None, top))
        if states:
            src = states[-1][1]
            prog = _cached("trainer_state", src, _trainer_state)
            if len(states) >= 2 and states[-2][0] is not None and states[-1][0] is not None:
                (s1, f1), (s2, f2) = states[-2], states[-1]
                dt = os.stat(f2).st_mtime - os.stat(f1).st_mtime
                interval = s2 - s1
                if dt > 0 and interval > 0 and not prog.get("sps"):
                    prog = dict(prog, sps=dt / interval)   # HF logs no step time: saves are the clock
            if prog.get("save_steps"):
                interval = int(prog["save_steps"])
    if prog is not None:
        r["last_update"] = os.stat(src).st_mtime
        if prog.get("error"):
            problems.append(prog["error"])
        for k in ("step", "max_steps", "loss", "eval_loss"):
            r[k] = prog.get(k)
        r["losses"] = (prog.get("losses") or [])[-MAX_LOSS_POINTS:]
        r["eval_losses"] = prog.get("eval_losses") or []
        sps = prog.get("sps")
        t = prog.get("times") or []
        if sps is None and len(t) == 2 and t[1][0] > t[0][0]:
            sps = (t[1][1] - t[0][1]) / (t[1][0] - t[0][0])
        r["seconds_per_step"] = round(sps, 4) if sps else None
        if prog.get("nonfinite"):
            problems.append(prog["nonfinite"])
        if len(r["losses"]) >= 2 and "progress.jsonl" in names:
            interval = max(1, r["losses"][-1][0] - r["losses"][-2][0])
    return r, rj, problems, interval


def _decide(r, rj, problems, interval, live_pid, procs, stall_factor, now):
    """The state rules, in order: the trainer's own word, the final adapter, a live process."""
    said = rj.get("state")
    rpid = rj.get("pid") if isinstance(rj.get("pid"), int) and rj.get("pid") != procs.me else None
    done = r["adapter"] is not None or (r["step"] is not None and r["max_steps"] and r["step"] >= r["max_steps"])
    if said in ("queued", "cancelled", "finished", "failed"):
        r["state"] = said
        if said == "queued" and rpid and procs.alive(rpid):
            r["pid"] = rpid
        wpid = rj.get("waiter_pid")
        if said == "queued" and isinstance(wpid, int) and not procs.alive(wpid, rj.get("waiter_start_ticks")):
            # the launch waiter is what would start it: without it the run never starts
            r["state"] = "cancelled"
            problems.insert(0, f"queued, but its waiter (pid {wpid}) is gone: it will never start")
    elif done:
        r["state"] = "finished"
    elif live_pid is not None:
        r["state"], r["pid"] = "running", live_pid
        silent = now - r["last_update"] if r["last_update"] else None
        sps = r["seconds_per_step"]
        if silent is not None and sps:
            limit = max(MIN_STALL_S, stall_factor * sps, 2 * sps * interval)
            if silent > limit:
                r["state"] = "stalled"
                problems.insert(0, f"no progress for {silent:.0f}s (step time {sps:.1f}s)")
    elif said == "running" and rpid:
        r["state"] = "failed"
        problems.insert(0, f"run.json says running but pid {rpid} is gone (or now another process)")
    elif not problems:
        problems.append("no live process, no final adapter")
    if r["state"] in ("running", "stalled") and r["step"] is not None and r["max_steps"] and r["seconds_per_step"]:
        r["eta_seconds"] = round(max(0, r["max_steps"] - r["step"]) * r["seconds_per_step"], 1)
    if r["state"] in ("unknown", "failed", "stalled") or problems:
        r["reason"] = "; ".join(problems) or None


def _evidence(procs, run_paths, wanted, fresh, now):
    """{run path: pid} for runs a live process works in: cwd inside, named in argv, or a file open."""
    roots = tuple(sorted({os.path.dirname(p) + "/" for p in run_paths}))
    run_set = set(run_paths)

    def run_of(p):
        if p.startswith(roots):
            for root in roots:
                if p.startswith(root):
                    cand = root + p[len(root):].split("/", 1)[0]
                    if cand in run_set:
                        return cand
        return None

    # argv can only name a run if it holds the run's folder name: one regex search per process
    named = re.compile("|".join(re.escape(os.path.basename(r)) for r in sorted(wanted)))
    found = {}
    workers = []
    for pid in sorted(procs.others()):
        if procs.prog[pid] in BYSTANDERS or (pid in procs.marked and HELPER_MARK in procs.raw[pid]):
            continue
        workers.append(pid)
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            cwd = None
        hits = {run_of(cwd)} if cwd else set()
        for a in procs.argv(pid)[1:] if named.search(procs.raw[pid]) else ():
            for s in (a, a.partition("=")[2]):
                if s and ("/" in s or s in (".", "..")):
                    s = os.path.normpath(s if s.startswith("/") or not cwd else os.path.join(cwd, s))
                    hits.add(run_of(s))
        for run in hits:
            if run and run in wanted:
                found.setdefault(run, pid)
    missing = [r for r in wanted if r not in found]
    holders = _STATE["holders"]
    for run in list(missing):   # last poll's holder, checked alone: cheap and usually still true
        h = holders.get(run)
        if h and procs.alive(h[0], h[1]) and run in _open_runs(h[0], run_of):
            found[run] = h[0]
            missing.remove(run)
    if missing and (fresh or now - _STATE["fd_scan_at"] >= FD_SCAN_EVERY):
        _STATE["fd_scan_at"] = now
        for pid in workers:
            for run in _open_runs(pid, run_of):
                if run in missing and run not in found:
                    found[run] = pid
                    st = procs.stat(pid)
                    holders[run] = (pid, st[1] if st else None)
    return found


def _open_runs(pid, run_of):
    out = set()
    d = f"/proc/{pid}/fd"
    try:
        fds = os.listdir(d)
    except OSError:
        return out
    for fd in fds:
        try:
            p = os.readlink(d + "/" + fd)
        except OSError:
            continue
        if p.startswith("/"):
            run = run_of(p)
            # the final adapter is what serving processes map; that is use, not training
            if run and not p.startswith(run + "/adapter/"):
                out.add(run)
    return out


def runs(req, procs, warnings, now):
    """Every run folder under the configured roots, with its state decided."""
    facts, seen = [], set()
    for root in req.get("runs") or []:
        base = os.path.abspath(os.path.expanduser(root))
        if base in seen:
            continue
        seen.add(base)
        try:
            entries = sorted(e.path for e in os.scandir(base) if e.is_dir())
        except FileNotFoundError:
            continue
        except OSError as e:
            warnings.append(f"runs root {root}: {e.strerror or e}")
            continue
        for path in entries:
            try:
                names = set(os.listdir(path))
                if _is_run(names):
                    facts.append((path, names) + _run_facts(path, names, now))
            except Exception as e:   # noqa: BLE001 - one broken run must not hide the others
                warnings.append(f"run {path}: {type(e).__name__}: {e}")
    wanted = set()
    for path, _names, r, rj, _problems, _interval in facts:
        undecided = rj.get("state") not in ("queued", "cancelled", "finished", "failed") and not (
            r["adapter"] or (r["step"] is not None and r["max_steps"] and r["step"] >= r["max_steps"]))
        rpid = rj.get("pid")
        if undecided and not (isinstance(rpid, int) and rpid != procs.me and procs.alive(rpid, _start_ticks(rj))):
            wanted.add(path)
    live = _evidence(procs, [f[0] for f in facts], wanted, bool(req.get("fresh")), now) if wanted else {}
    out = []
    for path, _names, r, rj, problems, interval in facts:
        rpid = rj.get("pid")
        pid = live.get(path)
        if pid is None and isinstance(rpid, int) and rpid != procs.me and procs.alive(rpid, _start_ticks(rj)):
            pid = rpid
        _decide(r, rj, problems, interval, pid, procs, float(req.get("stall_factor") or 10), now)
        out.append(r)
    return out


# -- schedules ----------------------------------------------------------------------------------
_CRON_ALIAS = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
               "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *"}
_CRON_NAMES = {n: i for i, n in enumerate("jan feb mar apr may jun jul aug sep oct nov dec".split(), 1)}
_CRON_NAMES.update({n: i for i, n in enumerate("sun mon tue wed thu fri sat".split())})


def _cron_field(text, lo, hi):
    vals = set()
    for part in text.lower().split(","):
        rng, _, step = part.partition("/")
        if rng == "*":
            a, b = lo, hi
        else:
            a, _, b = rng.partition("-")
            a = _CRON_NAMES.get(a) if a in _CRON_NAMES else int(a)
            b = (_CRON_NAMES.get(b) if b in _CRON_NAMES else int(b)) if b else (hi if step else a)
        vals.update(range(a, b + 1, int(step) if step else 1))
    return vals


def cron_next(spec, now=None):
    """The next time (ISO, host-local) a cron spec fires after `now`; None for @reboot or junk."""
    try:
        f = _CRON_ALIAS.get(spec, spec).split()
        if len(f) != 5:
            return None
        mins, hours, doms, mons = (_cron_field(f[0], 0, 59), _cron_field(f[1], 0, 23),
                                   _cron_field(f[2], 1, 31), _cron_field(f[3], 1, 12))
        dows = {d % 7 for d in _cron_field(f[4], 0, 7)}
    except (ValueError, TypeError):
        return None
    start = (now or datetime.now()).replace(second=0, microsecond=0) + timedelta(minutes=1)
    for i in range(366 * 5):   # Feb 29 on a Monday can be years away
        d = start.date() + timedelta(days=i)
        if d.month not in mons:
            continue
        dm, dw = d.day in doms, d.isoweekday() % 7 in dows
        # cron's rule: with both day fields restricted, either one matching is enough
        if not ((dm or dw) if f[2][0] != "*" and f[4][0] != "*" else (dm and dw)):
            continue
        for h in sorted(hours):
            for m in sorted(mins):
                t = datetime(d.year, d.month, d.day, h, m)
                if t >= start:
                    return t.astimezone().isoformat(timespec="seconds")
    return None


def missing_paths(command, cron=False):
    """Absolute paths a command names that do not exist here (redirect targets excepted)."""
    if cron:   # cron turns the first unescaped % into a newline; what follows is stdin
        command = re.split(r"(?<!\\)%", command, maxsplit=1)[0].replace("\\%", "%")
    try:
        lex = shlex.shlex(command, posix=True, punctuation_chars=True)
        lex.whitespace_split = True
        toks = list(lex)
    except ValueError:
        toks = command.split()
    out, skip = [], False
    for i, t in enumerate(toks):
        if skip:
            skip = False
            continue
        if t and not t.strip("<>&|;()"):
            skip = ">" in t   # an output file need not exist before the job runs
            continue
        if i >= 2 and toks[i - 2] in ("test", "[", "[[") and re.match(r"^-[a-zA-Z]$", toks[i - 1]):
            continue   # `test -x /path || ...` checks for the path; its absence is expected
        if "=" in t and not t.startswith("/"):
            t = t.partition("=")[2]
        if (t.startswith("/") and not any(c in t for c in "*?[$`{~")
                and not t.startswith(("/dev/", "/proc/", "/sys/")) and not os.path.lexists(t)):
            out.append(t)
    return out


def _sched(kind, user, spec, command, source, sid, **kw):
    s = {"id": sid, "kind": kind, "user": user, "spec": spec, "command": command, "source": source,
         "next_run": None, "pid": None, "active": True, "start_time": None, "reasons": [], "raw": None,
         "line": None}
    s.update(kw)
    miss = missing_paths(command, cron=kind in ("crontab", "cron-file"))
    if miss:
        s["reasons"].append("dead-target")
        s["missing_paths"] = miss
    return s


def _cron_lines(text, kind, source, user, system, active=True):
    out, seen, bad = [], {}, []
    for n, raw in enumerate(text.split("\n"), 1):
        s = raw.strip()
        if not s or s.startswith("#") or ENV_RE.match(s):
            continue
        if s.startswith("@"):
            parts = s.split(None, 1)
            spec, rest = parts[0], parts[1] if len(parts) > 1 else ""
        else:
            m = CRON_RE.match(s)
            if not m:
                bad.append(n)
                continue
            spec, rest = " ".join(m.group(1, 2, 3, 4, 5)), m.group(6)
        u = user
        if system:
            parts = rest.split(None, 1)
            u, rest = (parts + [""])[:2] if parts else ("", "")
        if not rest:
            bad.append(n)
            continue
        key = (kind, u, source, spec, rest)
        seen[key] = seen.get(key, 0) + 1   # the same line twice in one file: two entries, two ids
        sid = _sid("c-", *key) if seen[key] == 1 else _sid("c-", *(key + (seen[key],)))
        e = _sched(kind, u, spec, rest, source, sid, raw=raw, line=n, active=active)
        e["next_run"] = cron_next(spec) if active else None
        out.append(e)
    return out, bad


def _crontabs(fresh):
    """Each user's crontab via `crontab -l` (every user's when root can see the spool)."""
    me = _me()
    users, spool = [me], None
    for d in ("/var/spool/cron/crontabs", "/var/spool/cron"):
        if os.path.isdir(d):
            spool = d
            break
    if spool and os.geteuid() == 0:
        try:
            users += sorted(n for n in os.listdir(spool) if n != me and os.path.isfile(os.path.join(spool, n))
                            and not n.startswith(".") and n not in ("atjobs", "atspool"))
        except OSError:
            pass
    out = []
    for u in users:
        try:   # the spool file's stat says whether `crontab -l` would say anything new
            key = _skey(os.stat(os.path.join(spool, u))) if spool else None
        except FileNotFoundError:
            key = "absent"
        except OSError:
            key = None
        hit = _CACHE.get(("crontab", u))
        if hit is not None and key is not None and hit[0] == key and not fresh:
            out += hit[1]
            continue
        rc, text, err = _run(["crontab", "-l"] + ([] if u == me else ["-u", u]))
        if rc is None:
            return out
        if rc != 0:
            text = ""
            if "no crontab" not in err.lower():
                raise OSError(f"crontab -l for {u}: {err or rc}")
        entries = _cron_lines(text, "crontab", "crontab -l", u, False)[0]
        _CACHE[("crontab", u)] = (key, entries)
        out += entries
    return out


def _cron_files(warnings):
    files = [("/etc/crontab", True)]
    try:
        files += [(os.path.join("/etc/cron.d", n), bool(CRON_D_NAME.match(n)))
                  for n in sorted(os.listdir("/etc/cron.d"))]
    except OSError:
        pass
    out = []
    for path, active in files:
        try:
            if not os.path.isfile(path):
                continue
            entries, bad = _cached("cron-file", path, lambda p, a=active: _cron_lines(_read(p), "cron-file", p, "", True, a))
            out += entries
            if bad and active:
                warnings.append("{}: lines {} are not cron entries".format(path, ", ".join(map(str, bad[:5]))))
        except OSError as e:
            warnings.append(f"{path}: {e.strerror or e}")
    return out


def _show(base, units):
    """`systemctl show` of units: {Id: {property: value}} (key=value blocks, never the table)."""
    props = "Id,ActiveState,TimersCalendar,TimersMonotonic,NextElapseUSecRealtime,Unit,ExecStart,User,FragmentPath"
    rc, out, err = _run(base + ["show", "-p", props, "--"] + units)
    res = {}
    for block in out.split("\n\n"):
        d = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        if d.get("Id"):
            res[d["Id"]] = d
    return res


def _timer_names(base, scope):
    rc, out, err = _run(base + ["list-timers", "--all", "--output=json", "--no-pager"])
    if rc != 0:   # no systemctl, or no manager to ask (a user without a running user manager)
        return None
    try:
        rows = json.loads(out)
        return {r["unit"]: r for r in rows if isinstance(r, dict) and r.get("unit")}
    except ValueError:
        pass   # systemd without JSON output: find the timer units on disk, ask `show` about them
    dirs = (["/etc/systemd/system", "/run/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system"]
            if scope == "system" else [os.path.expanduser("~/.config/systemd/user"), "/etc/systemd/user",
                                       "/usr/lib/systemd/user"])
    names = set()
    for d in dirs:
        for sub in ("", "timers.target.wants"):
            try:
                names |= {n for n in os.listdir(os.path.join(d, sub)) if n.endswith(".timer") and "@." not in n}
            except OSError:
                pass
    return {n: {} for n in sorted(names)}


def _timers(fresh):
    if not os.path.isdir(SYSTEMD_BOOTED):
        return []   # systemd is not PID 1 here: no timers can fire
    hit = _CACHE.get(("timers", ""))
    if hit is not None and not fresh and time.time() - hit[0] < TIMER_TTL:
        return hit[1]
    out = []
    for scope in ("system", "user"):
        base = ["systemctl"] + (["--user"] if scope == "user" else [])
        listed = _timer_names(base, scope)
        if not listed:
            continue
        info = _show(base, list(listed))
        services = {info.get(t, {}).get("Unit") or r.get("activates") for t, r in listed.items()}
        info.update(_show(base, sorted(s for s in services if s)))
        for t, row in listed.items():
            ti = info.get(t, {})
            svc = info.get(ti.get("Unit") or row.get("activates") or "", {})
            specs = re.findall(r"(On\w+)=([^;]+?)\s*;", ti.get("TimersCalendar", "") + ti.get("TimersMonotonic", ""))
            spec = ", ".join("{}={}".format(*kv) for kv in specs) or "?"
            m = re.search(r"argv\[\]=(.*?) ;", svc.get("ExecStart", ""))
            cmd = m.group(1) if m else (ti.get("Unit") or row.get("activates") or "")
            user = (svc.get("User") or "root") if scope == "system" else _me()
            nxt = row.get("next")
            nxt = _iso(nxt / 1e6) if _finite(nxt) and nxt > 0 else (ti.get("NextElapseUSecRealtime") or None)
            out.append(_sched("systemd-timer", user, spec, cmd, ti.get("FragmentPath") or "systemd",
                              _sid("t-", "systemd-timer", user, scope, t, spec, cmd), unit=t, scope=scope,
                              next_run=nxt, active=ti.get("ActiveState", "active") == "active"))
    _CACHE[("timers", "")] = (time.time(), out)
    return out


def _at_jobs(fresh):
    key = None
    for d in ("/var/spool/cron/atjobs", "/var/spool/at"):
        try:
            key = _skey(os.stat(d))
            break
        except OSError:
            pass
    hit = _CACHE.get(("atq", ""))
    if hit is not None and key is not None and hit[0] == key and not fresh:
        return hit[1]
    rc, out, err = _run(["atq"])
    if rc is None:
        return []
    jobs = []
    for line in out.splitlines():
        job, _, rest = line.partition("\t")
        f = rest.split()
        if not job.strip().isdigit() or len(f) < 7:
            continue
        when, user = " ".join(f[:5]), f[6]
        ck = ("at-c", job.strip() + "|" + when)
        if ck not in _CACHE:
            _CACHE[ck] = (None, _at_command(job.strip()))
        cmd = _CACHE[ck][1]
        try:
            nxt = datetime.strptime(when, "%a %b %d %H:%M:%S %Y").astimezone().isoformat(timespec="seconds")
        except ValueError:
            nxt = when
        jobs.append(_sched("at", user, when, cmd, "atq", _sid("a-", "at", user, job.strip(), when, cmd),
                           job=job.strip(), next_run=nxt, raw=line))
    _CACHE[("atq", "")] = (key, jobs)
    return jobs


def _at_command(job):
    rc, out, err = _run(["at", "-c", job])
    lines = out.split("\n")
    for i, line in enumerate(lines):   # the job text sits in a here-document at the end
        m = re.search(r"<<\s*'(\w+)'\s*$", line)
        if m:
            body = lines[i + 1:]
            end = body.index(m.group(1)) if m.group(1) in body else len(body)
            return "\n".join(body[:end]).strip()
    for i, line in enumerate(lines):   # older at: the job text follows the `cd DIR || { ... }` block
        if line.startswith("cd ") and "}" in lines[i:]:
            return "\n".join(lines[lines.index("}", i) + 1:]).strip()
    return lines[-1].strip() if lines else ""


def loops(procs):
    """Shell loops, `watch`, and shells with a `sleep` child found in /proc (never our own)."""
    found = {}
    for pid in procs.others():
        prog = procs.prog[pid]
        if pid in procs.marked or prog not in LOOPY:
            continue
        argv = procs.argv(pid)
        if prog == "watch":
            n = "2"
            for i, a in enumerate(argv[1:-1], 1):
                if a in ("-n", "--interval"):
                    n = argv[i + 1]
                elif a.startswith("--interval="):
                    n = a.split("=", 1)[1]
            found[pid] = (f"watch every {n}s", " ".join(argv[1:]))
        elif prog in SHELLS:
            script = argv[argv.index("-c") + 1] if "-c" in argv[:-1] else " ".join(argv[1:])
            if LOOP_RE.search(script):
                sl = re.search(r"\bsleep\s+(\S+)", script)
                found[pid] = ("while-loop" + (f", sleep {sl.group(1)}" if sl else ""), script)
        elif prog == "sleep":
            parent = procs.ppid(pid)
            pargv = procs.argv(parent)
            if (parent and parent not in procs.skip and parent not in found and procs.prog.get(parent) in SHELLS
                    and parent not in procs.marked):
                script = pargv[pargv.index("-c") + 1] if "-c" in pargv[:-1] else " ".join(pargv)
                found[parent] = ("shell with sleep {}".format(" ".join(argv[1:2])), script)
    out = []
    for pid, (spec, command) in sorted(found.items()):
        st = procs.stat(pid)
        uid = procs.uid(pid)
        if st is None or uid is None:
            continue
        user, argv = _user(uid), procs.argv(pid)
        out.append(_sched("loop", user, spec, command, f"/proc/{pid}",
                          _sid("l-", "loop", user, "\0".join(argv), st[1]), pid=pid, start_time=st[1]))
    return out


def schedules(req, procs, warnings):
    """Every schedule and loop on the host; each source guarded on its own."""
    fresh = bool(req.get("fresh"))
    out = []
    for name, fn in (("crontab", lambda: _crontabs(fresh)), ("cron files", lambda: _cron_files(warnings)),
                     ("systemd timers", lambda: _timers(fresh)), ("at jobs", lambda: _at_jobs(fresh)),
                     ("loops", lambda: loops(procs))):
        out += _guard(warnings, name, fn, [])
    return out


# -- the snapshot and the two ways to be asked for it ---------------------------------------------
def _guard(warnings, name, fn, default):
    try:
        return fn()
    except Exception as e:   # noqa: BLE001 - a section that breaks becomes a warning, not a crash
        warnings.append(f"{name}: {type(e).__name__}: {str(e)[:200]}")
        return default


def snapshot(request=None):
    """One snapshot of this host as the contract's probe reply (see the module docstring)."""
    req = request or {}
    if len(_CACHE) > 20000:   # runs come and go over a long session; the cache only saves time
        _CACHE.clear()
    now = time.time()
    warnings = []
    procs = _guard(warnings, "processes", Procs, None)
    if procs is None:
        procs = Procs.__new__(Procs)
        procs.me, procs.raw, procs.prog, procs.marked, procs.skip = os.getpid(), {}, {}, set(), {os.getpid()}
        procs._stat, procs._argv = {}, {}
    mode = req.get("gpu") or os.environ.get("FLEETDECK_PROBE_GPU") or "auto"
    g, source = _guard(warnings, "gpus", lambda: gpus(mode, procs, warnings), ([], None))
    paths = req.get("disk_paths")
    reply = {
        "memory": _guard(warnings, "memory", memory, {"total_bytes": 0, "used_bytes": 0}),
        "load1": _guard(warnings, "load", load1, None),
        "gpus": g,
        "gpu_source": source,
        "disks": _guard(warnings, "disks", lambda: disks(paths if paths is not None else req.get("runs") or []), []),
        "runs": _guard(warnings, "runs", lambda: runs(req, procs, warnings, now), []),
        "schedules": _guard(warnings, "schedules", lambda: schedules(req, procs, warnings), []),
        "warnings": warnings,
        "hostname": socket.gethostname(),
        "pid": os.getpid(),
        "time": now,
    }
    t = os.times()
    reply["probe_cpu_s"] = round(time.process_time(), 6)
    reply["probe_children_cpu_s"] = round(t[2] + t[3], 4)
    return reply


def handle(req):
    """One request -> one reply dict (errors become {"error": ...}, never an exception)."""
    if not isinstance(req, dict):
        return {"error": "request is not a JSON object"}
    op = req.get("op", "snapshot")
    if op == "ping":
        return {"ok": True}
    if op == "snapshot":
        return snapshot(req)
    return {"error": f"unknown op {op!r}"}


def _dump(obj):
    return json.dumps(obj, allow_nan=False, default=str)


def main(argv):
    """Resident (`--resident`: a JSON line in, a JSON line out, until EOF) or one-shot."""
    if "--resident" in argv[1:]:
        inp = sys.stdin.buffer
        while True:
            line = inp.readline()
            if not line:
                return 0
            if not line.strip():
                continue
            try:
                reply = handle(json.loads(line))
            except ValueError as e:
                reply = {"error": f"bad request: {e}"}
            except Exception as e:   # noqa: BLE001 - the resident probe outlives one bad poll
                reply = {"error": f"{type(e).__name__}: {e}"}
            sys.stdout.write(_dump(reply) + "\n")
            sys.stdout.flush()
    if len(argv) > 1 and not argv[1].startswith("-"):
        req = json.loads(argv[1])
    else:
        data = sys.stdin.read() if not sys.stdin.isatty() else ""
        req = json.loads(data) if data.strip() else {"op": "snapshot"}
    sys.stdout.write(_dump(handle(req)) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
