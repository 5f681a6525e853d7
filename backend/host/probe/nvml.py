"""The probe's NVML session: memory, utilisation and the card's health, each query guarded.

What each query costs decides when it is asked (measured on an H200, driver 580.159.04: see
docs/probe.md, "GPU health"):

- every poll, the cheap ones (a few microseconds each): memory, utilisation, temperature,
  power draw and limit, SM and memory clocks, throttle reasons, fan, PCIe generation, the ECC
  counters, remapped rows, the running processes, and a non-blocking read of the Xid events;
- once: the slowdown and shutdown thresholds and the clock maxima (GetMaxClockInfo costs
  about 1.6 ms and never changes);
- every RARE_S: ECC mode, persistence, compute and MIG mode, PCIe link width and maxima
  (0.2-0.4 ms each for ECC and MIG mode; they change on a reboot or an operator's command);
- never on the poll's path: PCIe throughput (the driver samples it for about 20 ms) and
  per-process utilisation (about 2 ms, "Not Found" when nothing was sampled). A resident probe
  asks them from a `Sampler` thread, one question right after a poll, and spaces its questions
  so that they take at most SAMPLER_SHARE of one core.

A query the driver answers "Not Supported" (or lacks) is remembered and not asked again: the
field is None (JSON null), never 0.
"""
# Runs on the host's Python 3.8 or newer, bundled with the probe.

from __future__ import annotations

import ctypes
import threading
import time

RARE_S = 300.0
#: the Sampler's questions use at most this share of one core (0.0002: 0.2 ms a second) and
#: are at least SAMPLER_GAP_S apart
SAMPLER_SHARE = 0.0002
SAMPLER_GAP_S = 2.0
#: a sampled figure older than this is no longer shown
SAMPLE_MAX_AGE_S = 600.0
#: Xid events are kept this long, at most XID_KEEP per GPU, and read at most XID_READ a poll
XID_KEEP_S = 3600.0
XID_KEEP = 16
XID_READ = 64
NVML_NA = 0xFFFFFFFFFFFFFFFF

#: clock event ("throttle") reason bits, nvml.h's nvmlClocksEventReason*, as words
THROTTLE_BITS = (
    (0x1, "idle"),
    (0x2, "applications-clocks-setting"),
    (0x4, "sw-power-cap"),
    (0x8, "hw-slowdown"),
    (0x10, "sync-boost"),
    (0x20, "sw-thermal-slowdown"),
    (0x40, "hw-thermal-slowdown"),
    (0x80, "hw-power-brake-slowdown"),
    (0x100, "display-clock-setting"),
)
COMPUTE_MODES = {0: "default", 1: "exclusive-thread", 2: "prohibited", 3: "exclusive-process"}


def throttle_words(mask):
    """The reasons set in a clock-event bitmask, as words ([] for none, None for unknown);
    a bit nvml.h does not name is given as its hex value."""
    if mask is None:
        return None
    mask = int(mask)
    out = [w for bit, w in THROTTLE_BITS if mask & bit]
    rest = mask & ~sum(b for b, _ in THROTTLE_BITS)
    bit = 1
    while rest and bit <= rest:
        if rest & bit:
            out.append("0x%x" % bit)
        bit <<= 1
    return out


def _text(v):
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def _handle_key(h):
    return ctypes.cast(h, ctypes.c_void_p).value


class Nvml:
    """NVML through NVIDIA's own binding (`pynvml` from nvidia-ml-py, carried in the probe's
    payload): initialised once per resident probe, device handles and names cached.

    Memory comes from the v2 query where the driver has it (its `used` excludes the driver's
    reservation, as nvidia-smi reports it), else v1. A device whose driver has no memory
    figures (GB10's unified memory: "Not Supported", or zeros) reports None for them.
    """

    def __init__(self, resident=False):
        import pynvml  # carried by the bundle; ImportError lands in the GPU section's reason

        self.nv = pynvml
        pynvml.nvmlInit()
        self.devices = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            self.devices.append(
                (i, h, _text(pynvml.nvmlDeviceGetName(h)), _text(pynvml.nvmlDeviceGetUUID(h)))
            )
        self._mem_v2 = True
        self.notes = []
        self.resident = resident
        self._never = set()  # (index, query) the driver does not support
        self._once = {}  # (index, query) -> value, asked once
        self._rare = {}  # index -> (asked at, {field: value})
        self.xids = {i: [] for i, _, _, _ in self.devices}
        self._events, self._watched = None, set()
        self.sampler = None
        if resident:
            self._watch_xids()
            self.sampler = Sampler(self)

    # -- one guarded question -----------------------------------------------------------------
    def ask(self, i, name, fn, *args):
        """fn(*args), or None when the driver cannot answer; "Not Supported" and a missing
        function are remembered for device `i` and not asked again."""
        if (i, name) in self._never:
            return None
        nv = self.nv
        try:
            return fn(*args)
        except (nv.NVMLError_NotSupported, nv.NVMLError_FunctionNotFound, AttributeError):
            self._never.add((i, name))
        except nv.NVMLError:
            pass
        return None

    def once(self, i, name, fn, *args):
        """A constant of device `i`: asked until the driver answers, then kept."""
        key = (i, name)
        if key not in self._once:
            v = self.ask(i, name, fn, *args)
            if v is None and key not in self._never:
                return None  # a passing failure: ask again next time
            self._once[key] = v
        return self._once[key]

    # -- memory, as before ---------------------------------------------------------------------
    def _memory(self, h):
        nv = self.nv
        if self._mem_v2:
            try:
                return nv.nvmlDeviceGetMemoryInfo(h, version=nv.nvmlMemory_v2)
            except nv.NVMLError_FunctionNotFound:
                self._mem_v2 = False  # an older driver without the v2 query: ask the v1 way
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
        """[(index, name, uuid, total_bytes|None, used_bytes|None, util|None,
        [(pid, bytes|None, {sm_pct, memory_util_pct})], health)], health being the contract's
        per-GPU health fields (docs/probe.md)."""
        nv = self.nv
        out, self.notes = [], []
        now = time.time()
        if self._events is not None:
            self._read_xids(now)
        for i, h, name, uuid in self.devices:
            try:
                out.append(self._device(i, h, name, uuid, now))
            except (
                nv.NVMLError
            ) as e:  # a card the driver lost (Xid 79): the others are still reported
                if self.sampler is not None:
                    self.sampler.busy[i] = False
                seen = sorted({c for _t, c in self.xids.get(i, ())})
                self.notes.append(
                    f"GPU{i} {name}: NVML says {e}; its figures are unknown this poll"
                    + (f" (Xid {', '.join(map(str, seen))} read in the last hour)" if seen else "")
                )
                # its identity and its Xid errors, so that gpu-xid can say what happened to it
                out.append(
                    (
                        i,
                        name,
                        uuid,
                        None,
                        None,
                        None,
                        [],
                        {"lost": str(e), "xid": self._xid_list(i)},
                    )
                )
        if self.sampler is not None:
            self.sampler.poke()
        return out

    def _device(self, i, h, name, uuid, now):
        nv = self.nv
        m = self._memory(h)
        known = m is not None and m.total > 0  # GB10: "Not Supported", or zeros on some drivers
        rates = self.ask(i, "util", nv.nvmlDeviceGetUtilizationRates, h)
        util = None if rates is None else rates.gpu
        try:
            plist = self._procs(h)
        except (
            nv.NVMLError
        ) as e:  # e.g. a MIG parent: the device still counts, its processes unknown
            plist = []
            self.notes.append(f"GPU{i} processes: {e}")
        health = self._health(i, h, now)
        health["memory_util_pct"] = None if rates is None else rates.memory
        per = self._proc_util(i, rates, now)
        procs = [(pid, used, per(pid)) for pid, used in plist]
        if self.sampler is not None:
            self.sampler.busy[i] = bool(plist) and bool(util)
        return (
            i,
            name,
            uuid,
            m.total if known else None,
            m.used if known else None,
            util,
            procs,
            health,
        )

    def _procs(self, h):
        nv = self.nv
        for fn in (
            "nvmlDeviceGetComputeRunningProcesses_v3",
            "nvmlDeviceGetComputeRunningProcesses_v2",
            "nvmlDeviceGetComputeRunningProcesses",
        ):
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

    # -- health ----------------------------------------------------------------------------------
    def _health(self, i, h, now):
        nv, ask, once = self.nv, self.ask, self.once
        power = ask(i, "power", nv.nvmlDeviceGetPowerUsage, h)
        limit = ask(i, "power_limit", nv.nvmlDeviceGetEnforcedPowerLimit, h)
        reasons = ask(i, "reasons", nv.nvmlDeviceGetCurrentClocksEventReasons, h)
        if reasons is None and (i, "reasons") in self._never:  # a driver before 535
            reasons = ask(i, "reasons_old", nv.nvmlDeviceGetCurrentClocksThrottleReasons, h)
        rare = self._rare_fields(i, h, now)
        vol, agg = nv.NVML_VOLATILE_ECC, nv.NVML_AGGREGATE_ECC
        cor, unc = nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
        ecc_count = nv.nvmlDeviceGetTotalEccErrors
        remap = ask(i, "remapped_rows", nv.nvmlDeviceGetRemappedRows, h)
        retired = ask(i, "retired_pending", nv.nvmlDeviceGetRetiredPagesPendingStatus, h)
        flags = [bool(x) for x in (remap[2] if remap else None, retired) if x is not None]
        tx_rx = self.sampler.pcie.get(i) if self.sampler is not None else None
        fresh = tx_rx is not None and now - tx_rx[2] < SAMPLE_MAX_AGE_S
        return {
            "temperature_c": ask(
                i, "temp", nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU
            ),
            "temperature_slowdown_c": once(
                i,
                "slowdown",
                nv.nvmlDeviceGetTemperatureThreshold,
                h,
                nv.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN,
            ),
            "temperature_shutdown_c": once(
                i,
                "shutdown",
                nv.nvmlDeviceGetTemperatureThreshold,
                h,
                nv.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN,
            ),
            "power_w": None if power is None else round(power / 1000.0, 1),
            "power_limit_w": None if limit is None else round(limit / 1000.0, 1),
            "sm_clock_mhz": ask(i, "sm_clock", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM),
            "sm_clock_max_mhz": once(
                i, "sm_clock_max", nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_SM
            ),
            "mem_clock_mhz": ask(i, "mem_clock", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM),
            "mem_clock_max_mhz": once(
                i, "mem_clock_max", nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_MEM
            ),
            "throttle_reasons": throttle_words(reasons),
            "fan_pct": ask(i, "fan", nv.nvmlDeviceGetFanSpeed, h),
            "pcie": {
                "gen": ask(i, "pcie_gen", nv.nvmlDeviceGetCurrPcieLinkGeneration, h),
                "gen_max": rare["pcie_gen_max"],
                "width": rare["pcie_width"],
                "width_max": rare["pcie_width_max"],
                "tx_bytes_s": tx_rx[0] if fresh else None,
                "rx_bytes_s": tx_rx[1] if fresh else None,
                "sampled_at": round(tx_rx[2], 3) if fresh else None,
            },
            "ecc": {
                "mode": rare["ecc_mode"],
                "corrected": ask(i, "ecc_cv", ecc_count, h, cor, vol),
                "uncorrected": ask(i, "ecc_uv", ecc_count, h, unc, vol),
                "corrected_aggregate": ask(i, "ecc_ca", ecc_count, h, cor, agg),
                "uncorrected_aggregate": ask(i, "ecc_ua", ecc_count, h, unc, agg),
                "pending_retirement": any(flags) if flags else None,
                "remapped_correctable": remap[0] if remap else None,
                "remapped_uncorrectable": remap[1] if remap else None,
                "remap_failure": bool(remap[3]) if remap else None,
            },
            "persistence_mode": rare["persistence_mode"],
            "compute_mode": rare["compute_mode"],
            "mig_mode": rare["mig_mode"],
            "xid": self._xid_list(i),
        }

    def _xid_list(self, i):
        return (
            None
            if i not in self._watched
            else [{"time": round(t, 3), "code": c} for t, c in self.xids[i]]
        )

    def _rare_fields(self, i, h, now):
        got = self._rare.get(i)
        if got is not None and now - got[0] < RARE_S:
            return got[1]
        nv, ask = self.nv, self.ask
        ecc = ask(i, "ecc_mode", nv.nvmlDeviceGetEccMode, h)
        pers = ask(i, "persistence", nv.nvmlDeviceGetPersistenceMode, h)
        comp = ask(i, "compute_mode", nv.nvmlDeviceGetComputeMode, h)
        mig = ask(i, "mig_mode", nv.nvmlDeviceGetMigMode, h)
        f = {
            "ecc_mode": None if ecc is None else ("enabled" if ecc[0] else "disabled"),
            "persistence_mode": None if pers is None else bool(pers),
            "compute_mode": None if comp is None else COMPUTE_MODES.get(comp, str(comp)),
            "mig_mode": None if mig is None else bool(mig[0]),
            "pcie_width": ask(i, "pcie_width", nv.nvmlDeviceGetCurrPcieLinkWidth, h),
            "pcie_gen_max": ask(i, "pcie_gen_max", nv.nvmlDeviceGetMaxPcieLinkGeneration, h),
            "pcie_width_max": ask(i, "pcie_width_max", nv.nvmlDeviceGetMaxPcieLinkWidth, h),
        }
        self._rare[i] = (now, f)
        return f

    def _proc_util(self, i, rates, now):
        """pid -> {sm_pct, memory_util_pct}: 0 when the card was idle over its last sample
        (then every process on it was), else the Sampler's last answer while fresh, else None."""
        if rates is not None and rates.gpu == 0 and rates.memory == 0:
            idle = {"sm_pct": 0, "memory_util_pct": 0}
            return lambda pid: idle
        got = self.sampler.procs.get(i) if self.sampler is not None else None
        none = {"sm_pct": None, "memory_util_pct": None}
        if got is None or now - got[1] >= SAMPLE_MAX_AGE_S:
            return lambda pid: none
        return lambda pid: got[0].get(pid, none)

    # -- Xid events ------------------------------------------------------------------------------
    def _watch_xids(self):
        """One event set for the probe's life, each device registered for Xid events where the
        driver allows it (a device it refuses has `xid` None)."""
        nv = self.nv
        try:
            self._events = nv.nvmlEventSetCreate()
        except (nv.NVMLError, AttributeError) as e:
            self.notes.append(f"Xid events not watched: {e}")
            return
        self._by_handle = {}
        for i, h, _, _ in self.devices:
            try:
                nv.nvmlDeviceRegisterEvents(h, nv.nvmlEventTypeXidCriticalError, self._events)
            except nv.NVMLError:
                continue
            self._watched.add(i)
            self._by_handle[_handle_key(h)] = i

    def _read_xids(self, now):
        nv = self.nv
        for _ in range(XID_READ):
            try:
                ev = nv.nvmlEventSetWait_v2(self._events, 0)
            except nv.NVMLError:
                break  # Timeout: nothing pending
            i = self._by_handle.get(_handle_key(ev.device))
            if i is not None and ev.eventType & nv.nvmlEventTypeXidCriticalError:
                self.xids[i].append((now, int(ev.eventData)))
        for i, xs in self.xids.items():
            if xs:
                self.xids[i] = [x for x in xs if now - x[0] < XID_KEEP_S][-XID_KEEP:]


class Sampler(threading.Thread):
    """The costly questions, off the poll's path: PCIe throughput (TX and RX, the driver samples
    each for about 20 ms) and per-process utilisation, one question right after a poll, spaced
    so that they take at most SAMPLER_SHARE of one core. Per-process utilisation is asked only
    of a card that had processes and was busy at the last poll: else NVML has nothing to say."""

    def __init__(self, nvml):
        threading.Thread.__init__(self, name="fleetdeck-nvml-sampler", daemon=True)
        self.nvml = nvml
        self.pcie = {}  # index -> (tx bytes/s, rx bytes/s, when)
        self.procs = {}  # index -> ({pid: {sm_pct, memory_util_pct}}, when)
        self.busy = {}
        self.cpu_s = 0.0
        self._last_seen = {}
        self._turn = 0
        self._wake = threading.Event()
        self._next = 0.0
        self.start()

    def poke(self):
        """A poll just ended: the next question may be asked now."""
        self._wake.set()

    def run(self):
        while True:
            self._wake.wait()
            self._wake.clear()
            if time.monotonic() < self._next:
                continue
            t0 = time.thread_time()
            try:
                self._one()
            except Exception:  # noqa: BLE001 - a sampler that dies leaves the figures null, not the probe
                pass
            spent = time.thread_time() - t0
            self.cpu_s += spent
            self._next = time.monotonic() + max(SAMPLER_GAP_S, spent / SAMPLER_SHARE)

    def _questions(self):
        n = self.nvml
        qs = []
        for i, h, _, _ in n.devices:
            if (i, "pcie_tx") not in n._never:
                qs.append(("pcie", i, h))
            if self.busy.get(i) and (i, "proc_util") not in n._never:
                qs.append(("procs", i, h))
        return qs

    def _one(self):
        qs = self._questions()
        if not qs:
            return
        kind, i, h = qs[self._turn % len(qs)]
        self._turn += 1
        n, nv = self.nvml, self.nvml.nv
        if kind == "pcie":
            tx = n.ask(i, "pcie_tx", nv.nvmlDeviceGetPcieThroughput, h, nv.NVML_PCIE_UTIL_TX_BYTES)
            rx = n.ask(i, "pcie_rx", nv.nvmlDeviceGetPcieThroughput, h, nv.NVML_PCIE_UTIL_RX_BYTES)
            if tx is not None and rx is not None:  # NVML's KB/s, 1 KB = 1024 bytes
                self.pcie[i] = (tx * 1024, rx * 1024, time.time())
            return
        since = self._last_seen.get(i) or int((time.time() - 10) * 1e6)
        try:
            samples = nv.nvmlDeviceGetProcessUtilization(h, since)
        except nv.NVMLError_NotFound:
            return  # nothing sampled since: no new figure
        except (nv.NVMLError_NotSupported, nv.NVMLError_FunctionNotFound, AttributeError):
            n._never.add((i, "proc_util"))
            return
        per = {}
        for s in samples:
            per.setdefault(int(s.pid), []).append((int(s.smUtil), int(s.memUtil)))
            self._last_seen[i] = max(self._last_seen.get(i) or 0, int(s.timeStamp))
        self.procs[i] = (
            {
                pid: {
                    "sm_pct": round(sum(a for a, _ in v) / len(v)),
                    "memory_util_pct": round(sum(b for _, b in v) / len(v)),
                }
                for pid, v in per.items()
            },
            time.time(),
        )
