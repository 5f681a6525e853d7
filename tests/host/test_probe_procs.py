"""The probe's processes section for the Host view's tree: each process with its parent pid, and a
trainer's workers listed under it (a real trainer-like process in a real run folder, with real
children that use no CPU and little memory, so only being its workers lists them)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from support.probe import probe, run_of, write_progress

TRAINER = """
import os, subprocess, sys, time
kids = [subprocess.Popen([sys.executable, "-c", "import os, time; os.chdir('/'); time.sleep(120)"])
        for _ in range(2)]
open(sys.argv[1], "w").write(" ".join(str(k.pid) for k in kids))
time.sleep(120)
"""


def test_a_trainers_workers_are_listed_under_it_with_their_parent_pid(tmp_path, children):
    run = tmp_path / "runs" / "run-1"
    (run / "checkpoints").mkdir(parents=True)
    write_progress(run, range(1, 11))
    ready = tmp_path / "kids"
    trainer = subprocess.Popen(
        [sys.executable, "-c", TRAINER, str(ready)], cwd=run, start_new_session=True
    )
    children.append(trainer)
    deadline = time.monotonic() + 60
    while not (ready.exists() and ready.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    kids = [int(k) for k in ready.read_text().split()]
    try:
        rep = probe({"runs": [str(tmp_path / "runs")]})
        assert run_of(rep, run)["pid"] == trainer.pid
        listed = {p["pid"]: p for p in rep["processes"]}
        assert "run" in listed[trainer.pid]["why"]
        for k in kids:
            assert k in listed, f"worker {k} is not listed: {sorted(listed)}"
            assert listed[k]["ppid"] == trainer.pid and "run" in listed[k]["why"]
        assert all(isinstance(p["ppid"], int) for p in rep["processes"])
    finally:
        for k in kids:
            try:
                os.kill(k, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_process_on_two_cards_is_listed_with_its_gpu_memory_summed(children):
    """The processes section's GPU memory per process is what the cards' own process lists say
    (NVML's used memory per pid, here as the GPU section hands it over), summed over cards."""
    from fleetdeck.backend.host.probe.common import Procs
    from fleetdeck.backend.host.probe.procs import processes

    p = subprocess.Popen(
        [sys.executable, "-c", "import time; print('ok', flush=True); time.sleep(120)"],
        stdout=subprocess.PIPE,
    )
    children.append(p)
    assert p.stdout.readline() == b"ok\n"
    gpus = [
        {"index": 0, "processes": [{"pid": p.pid, "used_mib": 1500.0}]},
        {"index": 1, "processes": [{"pid": p.pid, "used_mib": 500.0}]},
    ]
    listed = {x["pid"]: x for x in processes(Procs(), gpus, [], [], [])}
    assert listed[p.pid]["gpu_mib"] == 2000.0 and listed[p.pid]["why"][0] == "gpu"
    assert listed[p.pid]["ppid"] == os.getpid() and listed[p.pid]["rss_bytes"] > 0


def test_a_stopped_process_stays_listed_so_it_can_be_continued(children):
    """SIGSTOP leaves a process no CPU to be listed by; the probe lists it as `stopped`, so the
    operator who paused it from the Host view finds it again to send CONT."""
    from fleetdeck.backend.host.probe.common import Procs
    from fleetdeck.backend.host.probe.procs import processes

    p = subprocess.Popen(
        [sys.executable, "-c", "import time; print('ok', flush=True); time.sleep(120)"],
        stdout=subprocess.PIPE,
    )
    children.append(p)
    assert p.stdout.readline() == b"ok\n"
    os.kill(p.pid, signal.SIGSTOP)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with open(f"/proc/{p.pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "T":
                    break
            time.sleep(0.02)
        listed = {x["pid"]: x for x in processes(Procs(), [], [], [], [])}
        assert p.pid in listed and "stopped" in listed[p.pid]["why"]
        os.kill(p.pid, signal.SIGCONT)
        listed = {x["pid"]: x for x in processes(Procs(), [], [], [], [])}
        assert p.pid not in listed or "stopped" not in listed[p.pid]["why"]
    finally:
        os.kill(p.pid, signal.SIGCONT)


def test_a_process_usage_is_read_by_the_host_librarys_stat_reader(children):
    """The process list's usage is the walk's one read of /proc/PID/stat, parsed by the host
    library (`procfs.facts_of_stat`): a command name holding spaces and parentheses does not
    shift its fields, and the start time is the one `procfs` gives for the process's identity."""
    from fleetdeck.backend.host.lib import procfs
    from fleetdeck.backend.host.probe.common import Procs

    p = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time; open('/proc/self/comm', 'w').write('a) 1 2 (b');"
            " print('ok', flush=True); time.sleep(120)",
        ],
        stdout=subprocess.PIPE,
    )
    children.append(p)
    assert p.stdout.readline() == b"ok\n"
    with open(f"/proc/{p.pid}/comm") as f:
        assert f.read().strip() == "a) 1 2 (b"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # asleep, so that nothing below moves between reads
        with open(f"/proc/{p.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # proc(5) field N is index N - 3
        if fields[0] == "S":
            break
        time.sleep(0.02)
    ticks, rss, start, state = Procs().usage(p.pid)
    assert ticks == int(fields[11]) + int(fields[12])
    # the kernel's resident counters settle lazily: a few pages either way between two reads
    assert abs(rss - int(fields[21])) <= 64
    assert start == procfs.start_ticks(p.pid) == int(fields[19])
    assert state == "S"
    p.kill()
    p.wait()
    assert Procs().usage(p.pid) is None
