"""The probe's GPU section: nvidia-smi (missing, failing, unified and dedicated memory) and NVML
through the carried pynvml on a stub library, with the probe run as hosts run it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleetdeck.backend.fleet.link.wire import record_refusal
from fleetdeck.backend.host.probe.wire import Answer

from support.probe import PROBE, probe, sleeper


def stub_bin(tmp_path: Path, script: str) -> dict:
    d = tmp_path / "bin"
    d.mkdir()
    (d / "nvidia-smi").write_text("#!/bin/sh\n" + script)
    (d / "nvidia-smi").chmod(0o755)
    return dict(os.environ, PATH=f"{d}:/usr/bin:/bin", FLEETDECK_PROBE_GPU="nvidia-smi")


def test_no_nvidia_smi_means_no_gpus_and_a_warning_not_a_crash(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    rep = probe({"runs": []}, env=dict(os.environ, PATH=str(empty), FLEETDECK_PROBE_GPU="auto"))
    assert rep["gpus"] == [] and rep["gpu_source"] is None
    assert (
        "no NVIDIA driver on this host (no libnvidia-ml, no nvidia-smi): no GPUs" in rep["warnings"]
    )
    assert (
        rep["memory"]["total_bytes"] > rep["memory"]["used_bytes"] > 0 and rep["load1"] is not None
    )


def test_a_failing_nvidia_smi_is_a_warning(tmp_path):
    env = stub_bin(
        tmp_path,
        'echo "NVIDIA-SMI has failed because it couldn\'t communicate with the NVIDIA driver."\nexit 9\n',
    )
    rep = probe({}, env=env)
    assert rep["gpus"] == [] and any("couldn't communicate" in w for w in rep["warnings"])


def test_nvidia_smi_csv_with_unified_memory_takes_system_figures(tmp_path, children):
    holder = sleeper(
        children, code="import time; b = bytearray(b'x' * (64 << 20)); time.sleep(120)"
    )
    time.sleep(0.3)
    env = stub_bin(
        tmp_path,
        f"""case "$1" in
--query-gpu=*) echo "0, NVIDIA GB10, GPU-aaaa-bbbb, [N/A], [N/A], 37";;
--query-compute-apps=*) echo "GPU-aaaa-bbbb, {holder.pid}, [N/A]";;
esac
""",
    )
    rep = probe({}, env=env)
    assert rep["gpu_source"] == "nvidia-smi"
    (g,) = rep["gpus"]
    assert (g["name"], g["uuid"], g["unified_memory"], g["utilization_pct"]) == (
        "NVIDIA GB10",
        "GPU-aaaa-bbbb",
        True,
        37,
    )
    assert g["memory_total_mib"] == pytest.approx(rep["memory"]["total_bytes"] / 2**20, rel=1e-3)
    (p,) = g["processes"]
    assert p["pid"] == holder.pid and p["user"]
    assert "bytearray" in p["command"] and p["used_mib"] >= 64  # its RSS stands in for GPU memory


def test_nvidia_smi_csv_with_dedicated_memory(tmp_path):
    env = stub_bin(
        tmp_path,
        """case "$1" in
--query-gpu=*) echo "0, NVIDIA H200, GPU-1, 143771, 10322, 0"; echo "1, NVIDIA H200, GPU-2, 143771, 0, 5";;
--query-compute-apps=*) echo "GPU-1, 999999, 10240";;
esac
""",
    )
    rep = probe({}, env=env)
    assert [
        (g["index"], g["memory_total_mib"], g["memory_used_mib"], g["unified_memory"])
        for g in rep["gpus"]
    ] == [(0, 143771, 10322, False), (1, 143771, 0, False)]
    assert rep["gpus"][0]["processes"] == [
        {
            "pid": 999999,
            "user": "",
            "used_mib": 10240,
            "command": "",
            "sm_pct": None,
            "memory_util_pct": None,
        }
    ]


def test_nvidia_smi_health_fields_by_the_names_this_nvidia_smi_lists(tmp_path):
    """The fallback asks only for the fields `--help-query-gpu` lists (a name nvidia-smi does not
    know fails the whole query), under whichever of a field's names it knows; what it prints as
    [N/A] or [Not Supported], and what it cannot be asked, is null."""
    d = tmp_path / "bin"
    d.mkdir()
    (d / "nvidia-smi").write_text(f"""#!{sys.executable}
import sys
arg = sys.argv[1]
values = {{"index": "0", "name": "NVIDIA H200", "uuid": "GPU-1", "memory.total": "143771", "memory.used": "10322",
          "utilization.gpu": "97", "utilization.memory": "31", "temperature.gpu": "61", "power.draw": "612.35",
          "enforced.power.limit": "700.00", "clocks.sm": "1755", "clocks.max.sm": "1980", "clocks.mem": "3201",
          "clocks.max.mem": "3201", "clocks_throttle_reasons.active": "0x0000000000000044", "fan.speed": "[N/A]",
          "pcie.link.gen.current": "5", "pcie.link.gen.max": "5", "pcie.link.width.current": "16",
          "pcie.link.width.max": "16", "ecc.mode.current": "Enabled", "ecc.errors.corrected.volatile.total": "3",
          "ecc.errors.uncorrected.volatile.total": "0", "ecc.errors.corrected.aggregate.total": "7",
          "ecc.errors.uncorrected.aggregate.total": "[Not Supported]", "retired_pages.pending": "[N/A]",
          "persistence_mode": "Enabled", "compute_mode": "Exclusive_Process", "mig.mode.current": "Disabled"}}
if arg == "--help-query-gpu":
    for k in values:
        print('"' + k + '"' + (' or "clocks.current.sm"' if k == "clocks.sm" else ""))
        print("Some words about it.")
elif arg.startswith("--query-gpu="):
    asked = arg.split("=", 1)[1].split(",")
    bad = [k for k in asked if k not in values]
    if bad:
        print('Field "%s" is not a valid field to query.' % bad[0])
        sys.exit(2)
    print(", ".join(values[k] for k in asked))
""")
    (d / "nvidia-smi").chmod(0o755)
    rep = probe(
        {}, env=dict(os.environ, PATH=f"{d}:/usr/bin:/bin", FLEETDECK_PROBE_GPU="nvidia-smi")
    )
    assert rep["gpu_source"] == "nvidia-smi", rep["warnings"]
    assert record_refusal(rep, Answer) is None  # the answer is what backend/host/probe/wire.py says
    (g,) = rep["gpus"]
    assert (
        g["utilization_pct"],
        g["memory_util_pct"],
        g["temperature_c"],
        g["power_w"],
        g["power_limit_w"],
    ) == (97, 31, 61, 612.35, 700.0)
    assert (
        g["sm_clock_mhz"],
        g["sm_clock_max_mhz"],
        g["mem_clock_mhz"],
        g["mem_clock_max_mhz"],
    ) == (1755, 1980, 3201, 3201)
    assert g["throttle_reasons"] == [
        "sw-power-cap",
        "hw-thermal-slowdown",
    ]  # the older name, 0x44 decoded
    assert g["fan_pct"] is None and g["temperature_slowdown_c"] is None and g["xid"] is None
    assert g["pcie"] == {
        "gen": 5,
        "gen_max": 5,
        "width": 16,
        "width_max": 16,
        "tx_bytes_s": None,
        "rx_bytes_s": None,
        "sampled_at": None,
    }
    assert g["ecc"] == {
        "mode": "enabled",
        "corrected": 3,
        "uncorrected": 0,
        "corrected_aggregate": 7,
        "uncorrected_aggregate": None,
        "pending_retirement": None,
        "remapped_correctable": None,
        "remapped_uncorrectable": None,
        "remap_failure": None,
    }
    assert (g["persistence_mode"], g["compute_mode"], g["mig_mode"]) == (
        True,
        "exclusive-process",
        False,
    )


NVML_STUB = r"""
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned int version; unsigned long long total, reserved, free, used; } nvmlMemory_v2_t;
typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;
typedef struct { unsigned int pid; unsigned long long usedGpuMemory; unsigned int gi, ci; } nvmlProcessInfo_t;
typedef struct { unsigned int pid; unsigned long long timeStamp; unsigned int smUtil, memUtil, encUtil, decUtil; } nvmlProcessUtilizationSample_t;
typedef struct dev { int idx; } *nvmlDevice_t;
typedef struct { nvmlDevice_t device; unsigned long long eventType, eventData; unsigned int gi, ci; } nvmlEventData_t;
typedef struct evset { int registered[2]; } *nvmlEventSet_t;
static struct dev devs[2] = {{0}, {1}};
static struct evset the_set;
enum { OK = 0, NOT_SUPPORTED = 3, NOT_FOUND = 6, INSUFFICIENT_SIZE = 7, TIMEOUT = 10, GPU_IS_LOST = 15 };
/* device 0 stands for an H200 that answers everything but the fan; device 1 for a GB10 that
   answers "Not Supported" to most health queries. Some calls are logged, to count them. */
static void logged(const char *what, nvmlDevice_t d) {
    const char *p = getenv("NVML_STUB_LOG");
    FILE *f = p ? fopen(p, "a") : NULL;
    if (f) { fprintf(f, "%s %d\n", what, d ? d->idx : -1); fclose(f); }
}
int nvmlInitWithFlags(unsigned int f) { return 0; }
int nvmlInit_v2(void) { return 0; }
int nvmlShutdown(void) { return 0; }
const char *nvmlErrorString(int r) {
    return r == 3 ? "Not Supported" : r == 6 ? "Not Found" : r == 10 ? "Timeout" : r == 15 ? "GPU is lost" : "Unknown Error";
}
/* device 0 has fallen off the bus while the file NVML_STUB_LOST names exists */
static int lost(nvmlDevice_t d) { const char *p = getenv("NVML_STUB_LOST"); return !d->idx && p && access(p, F_OK) == 0; }
int nvmlDeviceGetCount_v2(unsigned int *n) { *n = 2; return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *h) { *h = &devs[i]; return 0; }
int nvmlDeviceGetName(nvmlDevice_t d, char *b, unsigned int n) { snprintf(b, n, d->idx ? "NVIDIA GB10" : "NVIDIA H200"); return 0; }
int nvmlDeviceGetUUID(nvmlDevice_t d, char *b, unsigned int n) { snprintf(b, n, "GPU-stub-%d", d->idx); return 0; }
/* v1 counts the driver's reservation as used; v2 does not, as nvidia-smi reports it */
int nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) {
    if (lost(d)) return GPU_IS_LOST;
    if (d->idx == 1) return 3;  /* GB10: Not Supported */
    m->total = 143771ULL << 20; m->used = 10322ULL << 20; m->free = m->total - m->used; return 0;
}
int nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u) {
    u->gpu = d->idx ? 0 : 42; u->memory = d->idx ? 0 : 7; return 0;   /* the GB10 is idle */
}
int nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_t *p) {
    if (*count < 1 || !p) { *count = 1; return 7; }  /* NVML_ERROR_INSUFFICIENT_SIZE */
    *count = 1; p[0].pid = (unsigned int)atoi(getenv("NVML_STUB_PID"));
    p[0].usedGpuMemory = d->idx ? ~0ULL : 10240ULL << 20; return 0;
}
int nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned int *t) { *t = d->idx ? 48 : 61; return OK; }
int nvmlDeviceGetTemperatureThreshold(nvmlDevice_t d, int which, unsigned int *t) {
    if (d->idx) return NOT_SUPPORTED;
    logged("threshold", d);
    *t = which == 1 ? 89 : which == 0 ? 95 : 87; return OK;
}
int nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *mw) { if (d->idx) return NOT_SUPPORTED; *mw = 350123; return OK; }
int nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t d, unsigned int *mw) { if (d->idx) return NOT_SUPPORTED; *mw = 700000; return OK; }
int nvmlDeviceGetClockInfo(nvmlDevice_t d, int type, unsigned int *mhz) { *mhz = type == 1 ? (d->idx ? 2418 : 1755) : 3201; return OK; }
int nvmlDeviceGetMaxClockInfo(nvmlDevice_t d, int type, unsigned int *mhz) {
    logged("max_clock", d); *mhz = type == 1 ? (d->idx ? 3003 : 1980) : 3201; return OK;
}
static unsigned long long reasons(nvmlDevice_t d) {
    const char *r = getenv("NVML_STUB_REASONS");
    return d->idx ? 0 : r ? strtoull(r, NULL, 16) : 0x44;   /* SW power cap + HW thermal slowdown */
}
#ifdef WITH_V2
int nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m) {
    if (m->version != ((unsigned)sizeof(nvmlMemory_v2_t) | (2u << 24))) return 25;  /* ARGUMENT_VERSION_MISMATCH */
    if (lost(d)) return GPU_IS_LOST;
    if (d->idx == 1) return 3;
    m->total = 143771ULL << 20; m->reserved = 530ULL << 20; m->used = 9792ULL << 20;
    m->free = m->total - m->used - m->reserved; return 0;
}
/* a driver of 535 or later; the older one has only the throttle-reasons name, no row
   remapper and no MIG */
int nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t d, unsigned long long *r) { *r = reasons(d); return OK; }
int nvmlDeviceGetRemappedRows(nvmlDevice_t d, unsigned int *c, unsigned int *u, unsigned int *p, unsigned int *f) {
    if (d->idx) return NOT_SUPPORTED;
    *c = 2; *u = 1; *p = 1; *f = 0; return OK;
}
int nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned int *cur, unsigned int *pend) {
    if (d->idx) return NOT_SUPPORTED;
    *cur = 0; *pend = 0; return OK;
}
#endif
int nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t d, unsigned long long *r) { *r = reasons(d); return OK; }
int nvmlDeviceGetFanSpeed(nvmlDevice_t d, unsigned int *pct) {
    logged("fan", d);
    if (!d->idx) return NOT_SUPPORTED;   /* passively cooled */
    *pct = 40; return OK;
}
int nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t d, unsigned int *g) { if (d->idx) return NOT_SUPPORTED; *g = 5; return OK; }
int nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t d, unsigned int *w) { if (d->idx) return NOT_SUPPORTED; *w = 16; return OK; }
int nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t d, unsigned int *g) { if (d->idx) return NOT_SUPPORTED; *g = 5; return OK; }
int nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t d, unsigned int *w) { if (d->idx) return NOT_SUPPORTED; *w = 16; return OK; }
int nvmlDeviceGetPcieThroughput(nvmlDevice_t d, int counter, unsigned int *kb) {
    logged(counter ? "pcie_rx" : "pcie_tx", d);
    if (d->idx) return NOT_SUPPORTED;
    *kb = counter ? 2000 : 1000; return OK;
}
int nvmlDeviceGetEccMode(nvmlDevice_t d, int *cur, int *pend) {
    logged("ecc_mode", d);
    if (d->idx) return NOT_SUPPORTED;
    *cur = 1; *pend = 1; return OK;
}
int nvmlDeviceGetTotalEccErrors(nvmlDevice_t d, int type, int counter, unsigned long long *n) {
    if (d->idx) return NOT_SUPPORTED;
    *n = counter ? (type ? 2 : 7) : (type ? 1 : 3); return OK;   /* volatile 3 / 1, aggregate 7 / 2 */
}
int nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t d, int *p) { return NOT_SUPPORTED; }  /* Hopper remaps rows */
int nvmlDeviceGetPersistenceMode(nvmlDevice_t d, int *m) { if (d->idx) return NOT_SUPPORTED; *m = 1; return OK; }
int nvmlDeviceGetComputeMode(nvmlDevice_t d, int *m) { *m = d->idx ? 0 : 3; return OK; }
int nvmlDeviceGetProcessUtilization(nvmlDevice_t d, nvmlProcessUtilizationSample_t *s, unsigned int *count,
                                    unsigned long long since) {
    logged("proc_util", d);
    if (d->idx) return NOT_SUPPORTED;
    if (!s || *count < 2) { *count = 2; return INSUFFICIENT_SIZE; }
    *count = 2;
    for (int i = 0; i < 2; i++) {
        s[i].pid = (unsigned int)atoi(getenv("NVML_STUB_PID")); s[i].timeStamp = since + 1000 + i;
        s[i].smUtil = i ? 79 : 75; s[i].memUtil = 16; s[i].encUtil = s[i].decUtil = 0;
    }
    return OK;
}
int nvmlEventSetCreate(nvmlEventSet_t *set) { *set = &the_set; return OK; }
int nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long types, nvmlEventSet_t set) {
    logged("register_events", d);
    if (d->idx || !(types & 8)) return NOT_SUPPORTED;
    set->registered[d->idx] = 1; return OK;
}
/* an Xid 79 on device 0 each time the file NVML_STUB_XID names exists (it is removed) */
int nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeout) {
    const char *p = getenv("NVML_STUB_XID");
    if (timeout != 0) return 999;   /* the probe must never block */
    if (!p || !set->registered[0] || unlink(p) != 0) return TIMEOUT;
    data->device = &devs[0]; data->eventType = 8; data->eventData = 79; data->gi = data->ci = 0;
    return OK;
}
int nvmlEventSetFree(nvmlEventSet_t set) { return OK; }
"""


def build_stub(tmp_path: Path, v2: bool = True) -> Path:
    if shutil.which("cc") is None:
        pytest.skip("no C compiler to build the stand-in NVML library")
    (tmp_path / "nvml.c").write_text(NVML_STUB)
    subprocess.run(
        [
            "cc",
            "-shared",
            "-fPIC",
            *(["-DWITH_V2"] if v2 else []),
            "-o",
            str(tmp_path / "libnvidia-ml.so.1"),
            str(tmp_path / "nvml.c"),
        ],
        check=True,
    )
    return tmp_path


def stub_env(tmp_path: Path, pid: int) -> dict:
    return dict(
        os.environ,
        LD_LIBRARY_PATH=str(tmp_path),
        FLEETDECK_PROBE_GPU="nvml",
        NVML_STUB_PID=str(pid),
        NVML_STUB_LOG=str(tmp_path / "calls.log"),
        NVML_STUB_XID=str(tmp_path / "xid"),
        NVML_STUB_LOST=str(tmp_path / "lost"),
    )


@pytest.mark.parametrize("v2", [True, False], ids=["driver-with-v2-memory", "driver-with-v1-only"])
def test_nvml_through_pynvml_with_a_unified_memory_device(tmp_path, children, v2):
    """NVML through nvidia-ml-py's pynvml (carried in the probe's payload) against a stand-in
    libnvidia-ml.so.1 built from C with NVML's signatures and structs: one dedicated-memory
    GPU, one that answers Not Supported (GB10); a driver with the v2 memory query (used
    without the reservation) and one without it."""
    build_stub(tmp_path, v2)
    holder = sleeper(
        children, code="import time; b = bytearray(b'x' * (48 << 20)); time.sleep(120)"
    )
    time.sleep(0.3)
    rep = probe({}, env=stub_env(tmp_path, holder.pid))
    assert rep["gpu_source"] == "nvml", rep["warnings"]
    h200, gb10 = rep["gpus"]
    assert (h200["name"], h200["uuid"], h200["unified_memory"], h200["utilization_pct"]) == (
        "NVIDIA H200",
        "GPU-stub-0",
        False,
        42,
    )
    assert (h200["memory_total_mib"], h200["memory_used_mib"]) == (143771, 9792 if v2 else 10322)
    assert [(p["pid"], p["used_mib"]) for p in h200["processes"]] == [(holder.pid, 10240)]
    assert "bytearray" in h200["processes"][0]["command"] and h200["processes"][0]["user"]
    assert gb10["unified_memory"] is True and gb10["name"] == "NVIDIA GB10"
    assert gb10["memory_total_mib"] == pytest.approx(rep["memory"]["total_bytes"] / 2**20, rel=1e-3)
    assert gb10["processes"][0]["used_mib"] >= 48  # no driver figure: the process's RSS


@pytest.mark.parametrize("v2", [True, False], ids=["driver-535-or-later", "older-driver"])
def test_nvml_health_fields_and_nulls_in_one_shot(tmp_path, children, v2):
    """Every health field from the stand-in's answers; what a device answers Not Supported to,
    and what an older driver lacks, is null, never 0. A one-shot probe watches no Xid events
    (`xid` null) and samples nothing (PCIe throughput and a busy card's per-process figures
    null); an idle card's processes are at 0 %."""
    build_stub(tmp_path, v2)
    holder = sleeper(children)
    rep = probe({}, env=stub_env(tmp_path, holder.pid))
    assert rep["gpu_source"] == "nvml", rep["warnings"]
    assert record_refusal(rep, Answer) is None  # the answer is what backend/host/probe/wire.py says
    h200, gb10 = rep["gpus"]
    assert (
        h200["temperature_c"],
        h200["temperature_slowdown_c"],
        h200["temperature_shutdown_c"],
    ) == (61, 89, 95)
    assert (h200["power_w"], h200["power_limit_w"], h200["memory_util_pct"]) == (350.1, 700.0, 7)
    assert (
        h200["sm_clock_mhz"],
        h200["sm_clock_max_mhz"],
        h200["mem_clock_mhz"],
        h200["mem_clock_max_mhz"],
    ) == (1755, 1980, 3201, 3201)
    assert h200["throttle_reasons"] == [
        "sw-power-cap",
        "hw-thermal-slowdown",
    ]  # through either name of the call
    assert h200["fan_pct"] is None  # passively cooled: Not Supported
    assert h200["pcie"] == {
        "gen": 5,
        "gen_max": 5,
        "width": 16,
        "width_max": 16,
        "tx_bytes_s": None,
        "rx_bytes_s": None,
        "sampled_at": None,
    }
    assert h200["ecc"] == {
        "mode": "enabled",
        "corrected": 3,
        "uncorrected": 1,
        "corrected_aggregate": 7,
        "uncorrected_aggregate": 2,
        # the row remapper's pending flag; the older driver has no remapper to ask
        "pending_retirement": True if v2 else None,
        "remapped_correctable": 2 if v2 else None,
        "remapped_uncorrectable": 1 if v2 else None,
        "remap_failure": False if v2 else None,
    }
    assert (h200["persistence_mode"], h200["compute_mode"], h200["mig_mode"]) == (
        True,
        "exclusive-process",
        False if v2 else None,
    )
    assert h200["xid"] is None
    assert (h200["processes"][0]["sm_pct"], h200["processes"][0]["memory_util_pct"]) == (None, None)
    # the GB10 answers its temperature, clocks, fan and compute mode, and Not Supported to the rest
    assert (gb10["temperature_c"], gb10["sm_clock_mhz"], gb10["fan_pct"], gb10["compute_mode"]) == (
        48,
        2418,
        40,
        "default",
    )
    assert gb10["throttle_reasons"] == []
    for key in (
        "temperature_slowdown_c",
        "temperature_shutdown_c",
        "power_w",
        "power_limit_w",
        "persistence_mode",
        "mig_mode",
        "xid",
    ):
        assert gb10[key] is None, key
    assert set(gb10["pcie"].values()) == {None}
    assert set(gb10["ecc"].values()) == {None}
    assert (
        gb10["utilization_pct"],
        gb10["processes"][0]["sm_pct"],
        gb10["processes"][0]["memory_util_pct"],
    ) == (0, 0, 0)


class Resident:
    """The probe as the poller runs it: one process, a JSON line in, a JSON line out."""

    def __init__(self, env: dict, children: list) -> None:
        self.p = subprocess.Popen(
            [sys.executable, str(PROBE), "--resident"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        children.append(self.p)

    def poll(self) -> dict:
        self.p.stdin.write(json.dumps({"op": "snapshot", "runs": [], "disk_paths": []}) + "\n")
        self.p.stdin.flush()
        return json.loads(self.p.stdout.readline())


def test_resident_nvml_samples_off_the_poll_path_reads_xids_and_asks_constants_once(
    tmp_path, children
):
    """A resident probe registers the Xid event set once and reads it without blocking at each
    poll (the stand-in refuses a wait with a timeout): an Xid appears with its code and the time
    it was read. PCIe throughput and per-process utilisation come from the sampler, right after
    a poll; the clock maxima and thresholds are asked once, ECC mode once in RARE_S, and the fan
    the H200 has none of is not asked again after its Not Supported.

    The sampler spaces its questions by the CPU they took (SAMPLER_SHARE), so how many polls it
    needs for its three questions (PCIe of each card, the busy card's processes) depends on how
    busy this machine is: the test polls until the stand-in has been asked all three."""
    build_stub(tmp_path)
    holder = sleeper(children)
    r = Resident(stub_env(tmp_path, holder.pid), children)
    log = tmp_path / "calls.log"
    first = r.poll()
    assert first["gpu_source"] == "nvml", first["warnings"]
    assert [g["xid"] for g in first["gpus"]] == [
        [],
        None,
    ]  # watched, none yet; the GB10 refuses the watch
    (tmp_path / "xid").write_text("")
    before = time.time()
    replies = [first]
    wanted = ("pcie_tx 0", "proc_util 0", "pcie_tx 1")
    deadline = time.monotonic() + 120
    while True:
        time.sleep(2.2)  # the sampler asks one question a poll, at least SAMPLER_GAP_S apart
        replies.append(r.poll())
        calls = log.read_text().splitlines()
        h200 = replies[-1]["gpus"][0]
        if all(w in calls for w in wanted) and h200["processes"][0]["sm_pct"] is not None:
            break
        assert time.monotonic() < deadline, (
            "the sampler never asked",
            [w for w in wanted if w not in calls],
        )
    h200, gb10 = replies[-1]["gpus"]
    (x,) = h200["xid"]
    assert x["code"] == 79 and before <= x["time"] <= replies[1]["time"] + 1
    assert all(
        rep["gpus"][0]["xid"] == [x] for rep in replies[1:]
    )  # read at the poll after the event, kept since
    assert h200["pcie"]["tx_bytes_s"] == 1000 * 1024 and h200["pcie"]["rx_bytes_s"] == 2000 * 1024
    assert first["time"] <= h200["pcie"]["sampled_at"] <= replies[-1]["time"]
    assert (h200["processes"][0]["sm_pct"], h200["processes"][0]["memory_util_pct"]) == (
        77,
        16,
    )  # mean of two samples
    assert gb10["pcie"]["tx_bytes_s"] is None and gb10["xid"] is None
    polls = len(replies)
    assert (
        calls.count("max_clock 0") == 2 and calls.count("threshold 0") == 2
    )  # SM and memory; slowdown and shutdown
    assert (
        calls.count("fan 0") == 1 and calls.count("fan 1") == polls
    )  # Not Supported, remembered; answered each poll
    assert calls.count("ecc_mode 0") == 1 and calls.count("register_events 0") == 1
    assert calls.count("pcie_tx 1") == 1  # Not Supported, not asked again
    assert "proc_util 1" not in calls  # an idle card is not asked: NVML would have nothing


def test_status_json_carries_every_health_field_through_the_controller(tmp_path, children):
    """`fleetdeck status --json` over a local host whose probe reads the stand-in: the health
    fields arrive through the poller and the controller's checks as docs/probe.md lists them,
    the GB10's unreported ones null (never 0), and the text table still prints."""
    build_stub(tmp_path)
    holder = sleeper(children)
    hosts = tmp_path / "hosts.toml"
    hosts.write_text("[hosts.a]\nlocal = true\n")
    env = stub_env(tmp_path, holder.pid)
    base = [sys.executable, "-m", "fleetdeck.cli.main", "status", "--hosts", str(hosts)]
    p = subprocess.run([*base, "--json"], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    (host,) = json.loads(p.stdout)["hosts"]
    h200, gb10 = host["gpus"]
    documented = {
        "memory_util_pct",
        "temperature_c",
        "temperature_slowdown_c",
        "temperature_shutdown_c",
        "power_w",
        "power_limit_w",
        "sm_clock_mhz",
        "sm_clock_max_mhz",
        "mem_clock_mhz",
        "mem_clock_max_mhz",
        "throttle_reasons",
        "fan_pct",
        "pcie",
        "ecc",
        "persistence_mode",
        "compute_mode",
        "mig_mode",
        "xid",
    }
    assert documented <= set(h200) and documented <= set(gb10)
    assert (h200["temperature_c"], h200["power_w"], h200["throttle_reasons"]) == (
        61,
        350.1,
        ["sw-power-cap", "hw-thermal-slowdown"],
    )
    assert h200["ecc"]["uncorrected"] == 1 and h200["pcie"]["width"] == 16 and h200["xid"] == []
    assert {"sm_pct", "memory_util_pct"} <= set(h200["processes"][0])
    assert (
        gb10["power_w"] is None and gb10["temperature_slowdown_c"] is None and gb10["xid"] is None
    )
    assert set(gb10["ecc"].values()) == {None} and gb10["unified_memory"] is True
    text = subprocess.run(
        base, capture_output=True, text=True, timeout=120, env={**env, "COLUMNS": "100"}
    )
    assert text.returncode == 0, text.stderr
    assert any(line.strip().startswith("a ") for line in text.stdout.splitlines()), text.stdout
    # a card the driver lost: still listed, by name, its figures unknown, the warning saying why
    (tmp_path / "lost").write_text("")
    p = subprocess.run([*base, "--json"], capture_output=True, text=True, timeout=120, env=env)
    (host,) = json.loads(p.stdout)["hosts"]
    lost = host["gpus"][0]
    assert (lost["name"], lost["utilization_pct"], lost["temperature_c"], lost["processes"]) == (
        "NVIDIA H200",
        None,
        None,
        [],
    )
    assert (
        "GPU0 NVIDIA H200: NVML says GPU is lost; its figures are unknown this poll"
        in host["warnings"]
    )


def test_a_card_the_driver_lost_keeps_its_xid_and_the_others_stay(tmp_path, children):
    """Xid 79: the driver answers "GPU is lost" for the card. The resident probe keeps its NVML
    session: the lost card is reported by its identity, the driver's words (`lost`) and its Xid
    errors, every figure null, with a warning naming it; the other card is still reported in
    full, and the card is back, its Xid kept, once the driver answers again. The controller
    fires gpu-xid on it."""
    build_stub(tmp_path)
    holder = sleeper(children)
    r = Resident(stub_env(tmp_path, holder.pid), children)
    first = r.poll()
    assert [g["name"] for g in first["gpus"]] == ["NVIDIA H200", "NVIDIA GB10"], first["warnings"]
    (tmp_path / "xid").write_text("")
    (tmp_path / "lost").write_text("")
    gone = r.poll()
    assert gone["gpu_source"] == "nvml" and [g["name"] for g in gone["gpus"]] == [
        "NVIDIA H200",
        "NVIDIA GB10",
    ]
    assert (
        "GPU0 NVIDIA H200: NVML says GPU is lost; its figures are unknown this poll (Xid 79 read in the last hour)"
        in gone["warnings"]
    )
    assert record_refusal(gone, Answer) is None  # a lost card is a declared record too
    lost, gb10 = gone["gpus"]
    assert lost["lost"] == "GPU is lost" and [x["code"] for x in lost["xid"]] == [79]
    assert (
        lost["memory_total_mib"],
        lost["memory_used_mib"],
        lost["utilization_pct"],
        lost["processes"],
    ) == (None, None, None, [])
    assert (
        lost["unified_memory"] is False
        and lost["temperature_c"] is None
        and set(lost["ecc"].values()) == {None}
    )
    assert gb10["unified_memory"] is True and gb10["temperature_c"] == 48
    (tmp_path / "lost").unlink()
    back = r.poll()
    assert [g["name"] for g in back["gpus"]] == ["NVIDIA H200", "NVIDIA GB10"]
    assert [x["code"] for x in back["gpus"][0]["xid"]] == [79]
