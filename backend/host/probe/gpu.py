"""The probe's GPU section: NVML, else nvidia-smi, else none (with the reason)."""
# Runs on the host's Python 3.8 or newer, bundled with the probe.

from __future__ import annotations

import csv
import shutil
import time

from fleetdeck.backend.host.probe.common import (
    STATE,
    meminfo,
    read_text,
    run_text,
    user_name,
)


# -- GPUs ---------------------------------------------------------------------------------------
class Nvml:
    """NVML through NVIDIA's own binding (`pynvml` from nvidia-ml-py, carried in the probe's
    payload): initialised once per resident probe, device handles and names cached.

    Memory comes from the v2 query where the driver has it (its `used` excludes the driver's
    reservation, as nvidia-smi reports it), else v1. A device whose driver has no memory
    figures (GB10's unified memory: "Not Supported", or zeros) reports None for them.
    """

    def __init__(self):
        import pynvml  # carried by the bundle; ImportError lands in the GPU section's reason

        self.nv = pynvml
        pynvml.nvmlInit()
        self.devices = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            self.devices.append((i, h, _text(pynvml.nvmlDeviceGetName(h)), _text(pynvml.nvmlDeviceGetUUID(h))))
        self._mem_v2 = True
        self.notes = []

    def _memory(self, h):
        nv = self.nv
        if self._mem_v2:
            try:
                return nv.nvmlDeviceGetMemoryInfo(h, version=nv.nvmlMemory_v2)
            except nv.NVMLError_FunctionNotFound:
                self._mem_v2 = False   # an older driver without the v2 query: ask the v1 way
            except nv.NVMLError_NotSupported:
                return None
            except nv.NVMLError as e:
                if getattr(e, "value", None) not in (nv.NVML_ERROR_ARGUMENT_VERSION_MISMATCH,):
                    raise
                self._mem_v2 = False
        try:
            return nv.nvmlDeviceGetMemoryInfo(h)
        except nv.NVMLError_NotSupported:
            return None

    def read(self):
        """[(index, name, uuid, total_bytes|None, used_bytes|None, util|None, [(pid, bytes|None)])]."""
        nv = self.nv
        out, self.notes = [], []
        for i, h, name, uuid in self.devices:
            m = self._memory(h)
            known = m is not None and m.total > 0   # GB10: "Not Supported", or zeros on some drivers
            try:
                util = nv.nvmlDeviceGetUtilizationRates(h).gpu
            except nv.NVMLError:
                util = None
            try:
                plist = self._procs(h)
            except nv.NVMLError as e:   # e.g. a MIG parent: the device still counts, its processes unknown
                plist = []
                self.notes.append(f"GPU{i} processes: {e}")
            out.append((i, name, uuid, m.total if known else None, m.used if known else None, util, plist))
        return out

    def _procs(self, h):
        nv = self.nv
        for fn in ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2",
                   "nvmlDeviceGetComputeRunningProcesses"):
            try:
                procs = getattr(nv, fn)(h)
                break
            except (nv.NVMLError_FunctionNotFound, AttributeError):
                continue
        else:
            raise nv.NVMLError(nv.NVML_ERROR_FUNCTION_NOT_FOUND)
        out = []
        for p in procs:
            used = p.usedGpuMemory
            out.append((int(p.pid), None if used in (None, 0, NVML_NA) else int(used)))
        return out


NVML_NA = 0xFFFFFFFFFFFFFFFF


def _text(v):
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def _smi_num(s):
    try:
        return float(s)
    except ValueError:
        return None   # "[N/A]", "[Not Supported]"


def _smi():
    if shutil.which("nvidia-smi") is None:
        return None
    q = "index,name,uuid,memory.total,memory.used,utilization.gpu"
    rc, out, err = run_text(["nvidia-smi", "--query-gpu=" + q, "--format=csv,noheader,nounits"])
    if rc is None:
        return None
    if rc != 0:
        raise OSError("nvidia-smi failed: {}".format(((err or out).strip().splitlines() or [f"exit {rc}"])[-1]))
    rc2, apps, err2 = run_text(["nvidia-smi", "--query-compute-apps=gpu_uuid,pid,used_memory",
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
        for line in read_text(f"/proc/{pid}/status").splitlines():
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
            if STATE["nvml"] is None and time.time() >= STATE["nvml_retry"]:
                STATE["nvml"] = Nvml()
            if STATE["nvml"] is not None:
                raw, source = STATE["nvml"].read(), "nvml"
                warnings.extend(STATE["nvml"].notes)
            else:
                why.append(STATE["nvml_error"])
        except Exception as e:   # noqa: BLE001 - no library, no driver, an old driver: say which
            STATE["nvml"], STATE["nvml_error"] = None, f"NVML: {e}"
            STATE["nvml_retry"] = time.time() + 60   # a host without the driver stays without it
            why.append(STATE["nvml_error"])
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
            no_driver = "nvidia-smi not found" in why and all("cannot open shared object" in w or "Library Not Found" in w or
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
            mem = mem or meminfo()
            total, used = mem["MemTotal"], mem["MemTotal"] - mem.get("MemAvailable", 0)
        ps = []
        for pid, b in plist:
            uid = procs.uid(pid)
            ps.append({"pid": pid, "user": "" if uid is None else user_name(uid),
                       "used_mib": round((b if b is not None else _rss(pid)) / 2 ** 20, 1),
                       "command": procs.command(pid)})
        out.append({"index": index, "name": name, "uuid": uuid, "unified_memory": unified,
                    "memory_total_mib": round(total / 2 ** 20, 1), "memory_used_mib": round(used / 2 ** 20, 1),
                    "utilization_pct": util, "processes": ps})
    return out, source
