"""What is a loop: real shells judged by a real resident probe over several polls.

A shell is a `loop` only when it really repeats (its text holds a while / until / for loop, or
it is seen starting the same child again and again); a script that sleeps once, a cron job's
`sh -c 'sleep 30; true'` and a shell at a prompt are not. A real loop keeps one id while its
children come and go.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.probe import PROBE


class Resident:
    """The probe as the poller runs it: one process, a JSON line in, a JSON line out."""

    def __init__(self) -> None:
        self.p = subprocess.Popen(
            [sys.executable, str(PROBE), "--resident"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def loops(self) -> dict[int, dict]:
        assert self.p.stdin and self.p.stdout
        self.p.stdin.write(json.dumps({"op": "snapshot", "gpu": "none"}) + "\n")
        self.p.stdin.flush()
        rep = json.loads(self.p.stdout.readline())
        return {s["pid"]: s for s in rep["schedules"] if s["kind"] == "loop"}

    def close(self) -> None:
        assert self.p.stdin
        self.p.stdin.close()
        self.p.wait(timeout=30)


@pytest.fixture
def group():
    """Processes started in their own session; each whole group is killed afterwards."""
    procs: list[subprocess.Popen] = []

    def start(argv, **kw) -> subprocess.Popen:
        p = subprocess.Popen(argv, start_new_session=True, **kw)
        procs.append(p)
        return p

    yield start
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()


def kids(pid: int, name: str) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            if f"({name})" in stat and int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(d.name))
    return out


def descendants_named(pid: int, name: str) -> list[int]:
    found, todo = [], [pid]
    while todo:
        cur = todo.pop()
        for d in Path("/proc").iterdir():
            if d.name.isdigit():
                try:
                    stat = (d / "stat").read_text()
                except OSError:
                    continue
                if int(stat.rsplit(")", 1)[1].split()[1]) == cur:
                    todo.append(int(d.name))
                    if f"({name})" in stat:
                        found.append(int(d.name))
    return found


def wait_until(cond, what: str):
    for _ in range(1000):
        got = cond()
        if got:
            return got
        time.sleep(0.02)
    raise AssertionError(f"never happened: {what}")


def test_one_shot_shells_are_not_loops_and_real_loops_keep_one_id(group, tmp_path):
    once = tmp_path / "sleeps-once.sh"
    once.write_text("#!/bin/bash\necho starting\nsleep 30\necho done\n")
    once.chmod(0o755)
    script = group(["bash", str(once)], stdout=subprocess.DEVNULL)
    # cron runs each job as `/bin/sh -c CMD`, a child of the cron daemon (not of a shell)
    cron = group(
        [
            sys.executable,
            "-c",
            "import subprocess, sys\n"
            "for _ in range(3):\n"
            "    subprocess.run(['/bin/sh', '-c', 'sleep 30; true'])\n",
        ]
    )
    # a shell at a prompt that ran one command
    prompt = group(
        ["bash", "-i"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    assert prompt.stdin
    prompt.stdin.write(b"sleep 30\n")
    prompt.stdin.flush()
    # a real loop whose every iteration forks a subshell: the subshell has the loop's argv
    loop = group(["bash", "-c", "while true; do (sleep 0.2); done"])
    plain = group(["bash", "-c", "while true; do sleep 0.2; done"])
    wait_until(lambda: kids(script.pid, "sleep"), "the script's sleep")
    (cron_sh,) = wait_until(lambda: kids(cron.pid, "sh"), "the cron job's shell")
    wait_until(lambda: kids(cron_sh, "sleep"), "the cron job's sleep")
    wait_until(lambda: kids(prompt.pid, "sleep"), "the prompt's sleep")
    probe = Resident()
    try:
        polls, sleeps = [], set()
        while len(polls) < 4 or len(sleeps) < 3:
            polls.append(probe.loops())
            sleeps.update(descendants_named(loop.pid, "sleep"))
            time.sleep(0.25)
    finally:
        probe.close()
    for found in polls:
        for p in (script, cron, prompt):
            assert p.pid not in found
        assert cron_sh not in found, "a cron job's child shell that sleeps once is not a loop"
        assert found[loop.pid]["spec"] == "while-loop, sleep 0.2"
        assert found[plain.pid]["command"] == "while true; do sleep 0.2; done"
        # the subshells the loop forks are the loop's, never loops of their own
        assert [
            s for s in found.values() if s["command"] == "while true; do (sleep 0.2); done"
        ] == [found[loop.pid]]
    assert len({f[loop.pid]["id"] for f in polls}) == 1
    assert len({f[plain.pid]["id"] for f in polls}) == 1
    assert len(polls[0][loop.pid]["id"]) == 34


def test_a_shell_without_a_script_is_a_loop_once_it_repeats_a_child(group):
    # the loop's text never reaches /proc (it came on stdin): only its behaviour shows it
    fed = group(["bash", "-s"], stdin=subprocess.PIPE)
    assert fed.stdin
    fed.stdin.write(b"while true; do sleep 0.3; done\n")
    fed.stdin.flush()
    wait_until(lambda: kids(fed.pid, "sleep"), "the first sleep")
    probe = Resident()
    try:
        first = probe.loops()
        seen = {}
        for _ in range(200):
            found = probe.loops()
            if fed.pid in found:
                seen[len(seen)] = found[fed.pid]
                if len(seen) == 3:
                    break
            time.sleep(0.1)
    finally:
        probe.close()
    assert fed.pid not in first, "one sleep seen once proves nothing"
    assert len(seen) == 3, "never judged a loop although it kept starting `sleep 0.3`"
    assert seen[0]["spec"] == "repeats sleep 0.3"
    assert len({s["id"] for s in seen.values()}) == 1


def test_a_script_read_from_a_fifo_is_never_opened_by_the_probe(group, tmp_path):
    from support.probe import probe

    fifo = tmp_path / "loop.fifo"
    os.mkfifo(fifo)
    # the writer keeps the FIFO open after bash read the script: a probe reading it would block
    group(["bash", "-c", f"(printf 'while true; do sleep 0.2; done\\n'; sleep 90) > {fifo}"])
    shell = group(["bash", str(fifo)])
    wait_until(lambda: kids(shell.pid, "sleep"), "the loop's first sleep")
    rep = probe({"gpu": "none"})  # answers (it would time out reading the FIFO)
    assert all(s["pid"] != shell.pid or s["spec"].startswith("repeats") for s in rep["schedules"])
    with open(fifo, "rb", buffering=0) as f:  # and it took nothing the writer wrote
        os.set_blocking(f.fileno(), False)
        assert f.read() is None
