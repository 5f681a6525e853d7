"""The probe's GPU section: nvidia-smi (missing, failing, unified and dedicated memory) and NVML
through the carried pynvml on a stub library, with the probe run as hosts run it."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from test_probe import probe, sleeper


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
    assert "no NVIDIA driver on this host (no libnvidia-ml, no nvidia-smi): no GPUs" in rep["warnings"]
    assert rep["memory"]["total_bytes"] > rep["memory"]["used_bytes"] > 0 and rep["load1"] is not None


def test_a_failing_nvidia_smi_is_a_warning(tmp_path):
    env = stub_bin(tmp_path, "echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\"\nexit 9\n")
    rep = probe({}, env=env)
    assert rep["gpus"] == [] and any("couldn't communicate" in w for w in rep["warnings"])


def test_nvidia_smi_csv_with_unified_memory_takes_system_figures(tmp_path, children):
    holder = sleeper(children, code="import time; b = bytearray(b'x' * (64 << 20)); time.sleep(120)")
    time.sleep(0.3)
    env = stub_bin(tmp_path, f"""case "$1" in
--query-gpu=*) echo "0, NVIDIA GB10, GPU-aaaa-bbbb, [N/A], [N/A], 37";;
--query-compute-apps=*) echo "GPU-aaaa-bbbb, {holder.pid}, [N/A]";;
esac
""")
    rep = probe({}, env=env)
    assert rep["gpu_source"] == "nvidia-smi"
    (g,) = rep["gpus"]
    assert (g["name"], g["uuid"], g["unified_memory"], g["utilization_pct"]) == ("NVIDIA GB10", "GPU-aaaa-bbbb", True, 37)
    assert g["memory_total_mib"] == pytest.approx(rep["memory"]["total_bytes"] / 2**20, rel=1e-3)
    (p,) = g["processes"]
    assert p["pid"] == holder.pid and p["user"]
    assert "bytearray" in p["command"] and p["used_mib"] >= 64   # its RSS stands in for GPU memory


def test_nvidia_smi_csv_with_dedicated_memory(tmp_path):
    env = stub_bin(tmp_path, """case "$1" in
--query-gpu=*) echo "0, NVIDIA H200, GPU-1, 143771, 10322, 0"; echo "1, NVIDIA H200, GPU-2, 143771, 0, 5";;
--query-compute-apps=*) echo "GPU-1, 999999, 10240";;
esac
""")
    rep = probe({}, env=env)
    assert [(g["index"], g["memory_total_mib"], g["memory_used_mib"], g["unified_memory"]) for g in rep["gpus"]] == [
        (0, 143771, 10322, False), (1, 143771, 0, False)]
    assert rep["gpus"][0]["processes"] == [{"pid": 999999, "user": "", "used_mib": 10240, "command": ""}]


NVML_STUB = r"""
#include <stdio.h>
#include <stdlib.h>
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned int version; unsigned long long total, reserved, free, used; } nvmlMemory_v2_t;
typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;
typedef struct { unsigned int pid; unsigned long long usedGpuMemory; unsigned int gi, ci; } nvmlProcessInfo_t;
typedef struct dev { int idx; } *nvmlDevice_t;
static struct dev devs[2] = {{0}, {1}};
int nvmlInitWithFlags(unsigned int f) { return 0; }
int nvmlInit_v2(void) { return 0; }
int nvmlShutdown(void) { return 0; }
const char *nvmlErrorString(int r) { return r == 3 ? "Not Supported" : "Unknown Error"; }
int nvmlDeviceGetCount_v2(unsigned int *n) { *n = 2; return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *h) { *h = &devs[i]; return 0; }
int nvmlDeviceGetName(nvmlDevice_t d, char *b, unsigned int n) { snprintf(b, n, d->idx ? "NVIDIA GB10" : "NVIDIA H200"); return 0; }
int nvmlDeviceGetUUID(nvmlDevice_t d, char *b, unsigned int n) { snprintf(b, n, "GPU-stub-%d", d->idx); return 0; }
/* v1 counts the driver's reservation as used; v2 does not, as nvidia-smi reports it */
int nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) {
    if (d->idx == 1) return 3;  /* GB10: Not Supported */
    m->total = 143771ULL << 20; m->used = 10322ULL << 20; m->free = m->total - m->used; return 0;
}
#ifdef WITH_V2
int nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m) {
    if (m->version != ((unsigned)sizeof(nvmlMemory_v2_t) | (2u << 24))) return 25;  /* ARGUMENT_VERSION_MISMATCH */
    if (d->idx == 1) return 3;
    m->total = 143771ULL << 20; m->reserved = 530ULL << 20; m->used = 9792ULL << 20;
    m->free = m->total - m->used - m->reserved; return 0;
}
#endif
int nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u) { u->gpu = 42; u->memory = 7; return 0; }
int nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_t *p) {
    if (*count < 1 || !p) { *count = 1; return 7; }  /* NVML_ERROR_INSUFFICIENT_SIZE */
    *count = 1; p[0].pid = (unsigned int)atoi(getenv("NVML_STUB_PID"));
    p[0].usedGpuMemory = d->idx ? ~0ULL : 10240ULL << 20; return 0;
}
"""


@pytest.mark.parametrize("v2", [True, False], ids=["driver-with-v2-memory", "driver-with-v1-only"])
def test_nvml_through_pynvml_with_a_unified_memory_device(tmp_path, children, v2):
    """NVML through nvidia-ml-py's pynvml (carried in the probe's payload) against a stand-in
    libnvidia-ml.so.1 built from C with NVML's signatures and structs: one dedicated-memory
    GPU, one that answers Not Supported (GB10); a driver with the v2 memory query (used
    without the reservation) and one without it."""
    if shutil.which("cc") is None:
        pytest.skip("no C compiler to build the stand-in NVML library")
    (tmp_path / "nvml.c").write_text(NVML_STUB)
    subprocess.run(["cc", "-shared", "-fPIC", *(["-DWITH_V2"] if v2 else []), "-o",
                    str(tmp_path / "libnvidia-ml.so.1"), str(tmp_path / "nvml.c")], check=True)
    holder = sleeper(children, code="import time; b = bytearray(b'x' * (48 << 20)); time.sleep(120)")
    time.sleep(0.3)
    env = dict(os.environ, LD_LIBRARY_PATH=str(tmp_path), FLEETDECK_PROBE_GPU="nvml", NVML_STUB_PID=str(holder.pid))
    rep = probe({}, env=env)
    assert rep["gpu_source"] == "nvml", rep["warnings"]
    h200, gb10 = rep["gpus"]
    assert (h200["name"], h200["uuid"], h200["unified_memory"], h200["utilization_pct"]) == (
        "NVIDIA H200", "GPU-stub-0", False, 42)
    assert (h200["memory_total_mib"], h200["memory_used_mib"]) == (143771, 9792 if v2 else 10322)
    assert [(p["pid"], p["used_mib"]) for p in h200["processes"]] == [(holder.pid, 10240)]
    assert "bytearray" in h200["processes"][0]["command"] and h200["processes"][0]["user"]
    assert gb10["unified_memory"] is True and gb10["name"] == "NVIDIA GB10"
    assert gb10["memory_total_mib"] == pytest.approx(rep["memory"]["total_bytes"] / 2**20, rel=1e-3)
    assert gb10["processes"][0]["used_mib"] >= 48   # no driver figure: the process's RSS
