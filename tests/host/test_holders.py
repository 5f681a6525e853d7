"""`fleetdeck holders HOST PATH`: real processes holding real files under a folder (an open fd, a
mapping, a cwd), named with a hostile file name, asked of a real sshd host; the answer is the
one purge's in-use check gives for the same folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.sshd

HOSTILE = "ckpt \x1b[2J$(touch pwned)\nshard"

HOLD = """
import mmap, os, sys, time
top, how = sys.argv[1], sys.argv[2]
if how == "fd":
    f = open(os.path.join(top, sys.argv[3]), "rb")
elif how == "maps":
    f = open(os.path.join(top, "weights.bin"), "rb")
    m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    f.close()
else:
    os.chdir(os.path.join(top, "sub"))
open(sys.argv[-1], "w").write("ready")
while True:
    time.sleep(0.2)
"""


def _cli(fleet_path, *args):
    return [
        sys.executable,
        "-m",
        "fleetdeck.cli.main",
        "--hosts",
        str(fleet_path),
        "holders",
        *args,
    ]


@pytest.fixture
def held(tmp_path, children):
    """A folder with three real holders: an fd on a file with a hostile name, a mapping, a cwd."""
    top = tmp_path / "run-3"
    (top / "sub").mkdir(parents=True)
    (top / HOSTILE).write_bytes(b"x" * 100)
    (top / "weights.bin").write_bytes(b"w" * 8192)
    (top / "idle.txt").write_bytes(b"nobody")
    pids = {}
    for how in ("fd", "maps", "cwd"):
        ready = tmp_path / f"{how}.ready"
        p = subprocess.Popen(
            [sys.executable, "-c", HOLD, str(top), how, HOSTILE, str(ready)],
            start_new_session=True,
            cwd="/",
        )
        children.append(p)
        pids[how] = p.pid
        deadline = time.monotonic() + 60
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    return top, pids


def test_holders_lists_the_fd_the_mapping_and_the_cwd_escaped(spare_fleet, tmp_path, held):
    top, pids = held
    spare_fleet.add("hd")
    fleet = spare_fleet.write_fleet(tmp_path / "hosts.toml")
    out = subprocess.run(
        _cli(fleet, "hd", str(top), "--json"), capture_output=True, text=True, timeout=180
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    by_pid = {h["pid"]: h for h in doc["holders"]}
    assert set(pids.values()) <= set(by_pid), doc
    assert {"how": "fd", "file": str(top / HOSTILE)} in by_pid[pids["fd"]]["uses"]
    assert {"how": "maps", "file": str(top / "weights.bin")} in by_pid[pids["maps"]]["uses"]
    assert {"how": "cwd", "file": str(top / "sub")} in by_pid[pids["cwd"]]["uses"]
    assert all(by_pid[p]["start"] > 0 for p in pids.values())
    assert doc["kind"] == "directory" and doc["complete"] is True and doc["processes_read"] > 3
    # the query's own login and helper are not holders, whatever their cwd
    assert all("fleetdeck-helper" not in h["command"] for h in doc["holders"])
    # the table shows the hostile name escaped, never as raw control characters
    out = subprocess.run(
        _cli(fleet, "hd", str(top)),
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "COLUMNS": "250"},
    )
    assert out.returncode == 0, out.stderr
    assert "\\x1b[2J$(touch pwned)\\nshard" in out.stdout and "\x1b" not in out.stdout
    assert not (tmp_path / "pwned").exists() and not os.path.exists("pwned")
    # one file alone: only its holder
    out = subprocess.run(
        _cli(fleet, "hd", str(top / "weights.bin"), "--json"),
        capture_output=True,
        text=True,
        timeout=180,
    )
    doc = json.loads(out.stdout)
    assert doc["kind"] == "file" and pids["maps"] in {h["pid"] for h in doc["holders"]}
    assert not {pids["fd"], pids["cwd"]} & {h["pid"] for h in doc["holders"]}


def test_holders_says_nobody_a_missing_path_and_a_relative_one_with_their_exit_codes(
    spare_fleet, tmp_path
):
    spare_fleet.add("hn")
    fleet = spare_fleet.write_fleet(tmp_path / "hosts.toml")
    quiet = tmp_path / "quiet"
    quiet.mkdir()
    (quiet / "f").write_text("x")
    out = subprocess.run(_cli(fleet, "hn", str(quiet)), capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    assert (
        out.stdout.startswith(f"no process holds a file under hn:{quiet} (")
        and "processes read)" in out.stdout
    )
    out = subprocess.run(
        _cli(fleet, "hn", str(tmp_path / "absent")), capture_output=True, text=True, timeout=180
    )
    assert out.returncode == 1 and "(not-found)" in out.stderr and "Traceback" not in out.stderr
    out = subprocess.run(_cli(fleet, "hn", "runs/x"), capture_output=True, text=True, timeout=180)
    assert out.returncode == 2 and "(not-absolute)" in out.stderr
    out = subprocess.run(
        _cli(fleet, "nosuchhost", str(quiet)), capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2 and "nosuchhost" in out.stderr


def test_holders_and_purges_in_use_check_name_the_same_processes(held):
    """One reader, one judgement: the pids holders names are the pids purge refuses for."""
    from fleetdeck.backend.host import holders as holders_remote
    from fleetdeck.backend.host.lib.serve import dispatch
    from fleetdeck.backend.host.purge.facts import gather

    top, pids = held
    ans = dispatch({"holders": holders_remote.holders}, {"op": "holders", "path": str(top)})
    assert ans["ok"], ans
    facts = gather([str(top)], [str(top.parent)], hashing=False)
    in_use = {h["pid"] for h in facts["holders"]}
    assert set(pids.values()) <= in_use
    from fleetdeck.backend.host.lib import procfs

    assert {h["pid"] for h in ans["holders"]} == in_use - {os.getpid(), *procfs.ancestors()}
