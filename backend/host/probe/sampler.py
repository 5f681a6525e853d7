"""The resident probe's sampler: the NVML questions too costly for the poll's path (PCIe
throughput, per-process utilisation), asked from a thread of their own (docs/probe.md, "GPU
health").
"""
# Runs on the host's Python 3.8 or newer, bundled with the probe.

from __future__ import annotations

import threading
import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: the probe does not import typing (8 ms on a host)
    from typing import Any

#: the Sampler's questions use at most this share of one core (0.0002: 0.2 ms a second) and
#: are at least SAMPLER_GAP_S apart
SAMPLER_SHARE = 0.0002
SAMPLER_GAP_S = 2.0
#: a sampled figure older than this is no longer shown
SAMPLE_MAX_AGE_S = 600.0


class Sampler(threading.Thread):
    """The costly questions, off the poll's path: PCIe throughput (TX and RX, the driver samples
    each for about 20 ms) and per-process utilisation, one question right after a poll, spaced
    so that they take at most SAMPLER_SHARE of one core. Per-process utilisation is asked only
    of a card that had processes and was busy at the last poll: else NVML has nothing to say."""

    def __init__(self, nvml: Any) -> None:
        """`nvml`: the `nvml.Nvml` session whose devices are sampled (it imports this module)."""
        threading.Thread.__init__(self, name="fleetdeck-nvml-sampler", daemon=True)
        self.nvml = nvml
        self.pcie: dict[int, tuple[float, float, float]] = {}  # index -> (tx B/s, rx B/s, when)
        self.procs: dict[int, tuple[dict, float]] = {}  # index -> ({pid: {sm_pct, ...}}, when)
        self.busy: dict[int, bool] = {}
        self.cpu_s = 0.0
        self._last_seen: dict = {}
        self._turn = 0
        self._wake = threading.Event()
        self._next = 0.0
        self.start()

    def poke(self) -> None:
        """A poll just ended: the next question may be asked now."""
        self._wake.set()

    def run(self) -> None:
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

    def _questions(self) -> list[tuple[str, int, object]]:
        n = self.nvml
        qs = []
        for i, h, _, _ in n.devices:
            if (i, "pcie_tx") not in n._never:
                qs.append(("pcie", i, h))
            if self.busy.get(i) and (i, "proc_util") not in n._never:
                qs.append(("procs", i, h))
        return qs

    def _one(self) -> None:
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
        per = {}  # type: dict
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
