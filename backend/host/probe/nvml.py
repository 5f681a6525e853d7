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
field is None (JSON null), never 0. The health fields are read in `probe/gpu_health`, the
sampler's questions in `probe/sampler`; this module holds the session, memory, utilisation,
processes and Xid events.
"""
# Runs on the host's Python 3.8 or newer, bundled with the probe.

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable

from fleetdeck.backend.host.probe import gpu_health
from fleetdeck.backend.host.probe.sampler import SAMPLE_MAX_AGE_S, Sampler

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: the probe does not import typing (8 ms on a host)
    from typing import Any

    from fleetdeck.backend.host.probe.wire import XidRecord

#: Xid events are kept this long, at most XID_KEEP per GPU, and read at most XID_READ a poll
XID_KEEP_S = 3600.0
XID_KEEP = 16
XID_READ = 64
NVML_NA = 0xFFFFFFFFFFFFFFFF


def _text(v: object) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def _handle_key(h: Any) -> int | None:
    return ctypes.cast(h, ctypes.c_void_p).value


class Nvml:
    """NVML through NVIDIA's own binding (`pynvml` from nvidia-ml-py, carried in the probe's
    payload): initialised once per resident probe, device handles and names cached.

    Memory comes from the v2 query where the driver has it (its `used` excludes the driver's
    reservation, as nvidia-smi reports it), else v1. A device whose driver has no memory
    figures (GB10's unified memory: "Not Supported", or zeros) reports None for them.
    """

    def __init__(self, resident: bool = False) -> None:
        # its ImportError lands in the GPU section's reason; pynvml is carried by the bundle
        # deferred: pynvml (330 KB, run only when the GPU section asks NVML)
        import pynvml

        self.nv = pynvml
        pynvml.nvmlInit()
        self.devices: list[tuple[int, Any, str, str]] = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            self.devices.append(
                (i, h, _text(pynvml.nvmlDeviceGetName(h)), _text(pynvml.nvmlDeviceGetUUID(h)))
            )
        self._mem_v2 = True
        self.notes: list[str] = []
        self.resident = resident
        self._never: set[tuple[int, str]] = set()  # (index, query) the driver does not support
        self._once: dict[tuple[int, str], Any] = {}  # (index, query) -> value, asked once
        self._rare: dict[int, tuple[float, dict]] = {}  # index -> (asked at, {field: value})
        self.xids = {i: [] for i, _, _, _ in self.devices}  # type: dict
        self._events: Any = None
        self._watched: set[int] = set()
        self._by_handle: dict[int | None, int] = {}
        self.sampler: Sampler | None = None
        if resident:
            self._watch_xids()
            self.sampler = Sampler(self)

    # -- one guarded question -----------------------------------------------------------------
    def ask(self, i: int, name: str, fn: Callable[..., Any], *args: Any) -> Any:
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

    def once(self, i: int, name: str, fn: Callable[..., Any], *args: Any) -> Any:
        """A constant of device `i`: asked until the driver answers, then kept."""
        key = (i, name)
        if key not in self._once:
            v = self.ask(i, name, fn, *args)
            if v is None and key not in self._never:
                return None  # a passing failure: ask again next time
            self._once[key] = v
        return self._once[key]

    # -- memory, as before ---------------------------------------------------------------------
    def _memory(self, h: Any) -> Any:
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

    def read(self) -> list[tuple]:
        """[(index, name, uuid, total_bytes|None, used_bytes|None, util|None,
        [(pid, bytes|None, {sm_pct, memory_util_pct})], health)], health being the contract's
        per-GPU health fields (docs/probe.md)."""
        nv = self.nv
        out: list[tuple] = []
        self.notes = []
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
                        {"lost": str(e), "xid": self.xid_list(i)},
                    )
                )
        if self.sampler is not None:
            self.sampler.poke()
        return out

    def _device(self, i: int, h: Any, name: str, uuid: str, now: float) -> tuple:
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
        health = gpu_health.health(self, i, h, now)
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

    def _procs(self, h: Any) -> list[tuple[int, int | None]]:
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

    def xid_list(self, i: int) -> list[XidRecord] | None:
        """The Xid events read for device `i` lately, None when it is not watched."""
        return (
            None
            if i not in self._watched
            else [{"time": round(t, 3), "code": c} for t, c in self.xids[i]]
        )

    def _proc_util(self, i: int, rates: Any, now: float) -> Callable[[int], dict]:
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
    def _watch_xids(self) -> None:
        """One event set for the probe's life, each device registered for Xid events where the
        driver allows it (a device it refuses has `xid` None)."""
        nv = self.nv
        try:
            self._events = nv.nvmlEventSetCreate()
        except (nv.NVMLError, AttributeError) as e:
            self.notes.append(f"Xid events not watched: {e}")
            return
        for i, h, _, _ in self.devices:
            try:
                nv.nvmlDeviceRegisterEvents(h, nv.nvmlEventTypeXidCriticalError, self._events)
            except nv.NVMLError:
                continue
            self._watched.add(i)
            self._by_handle[_handle_key(h)] = i

    def _read_xids(self, now: float) -> None:
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
