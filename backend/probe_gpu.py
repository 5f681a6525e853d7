"""The probe's GPU section: NVML, else nvidia-smi, else none (with the reason)."""
# Runs on the host's Python 3.8 or newer, bundled with the probe.

from __future__ import annotations

import csv
import ctypes
import shutil
import time

from fleetdeck.backend.probe_common import (
    _STATE,
    _meminfo,
    _read,
    _run,
    _user,
)


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
