"""`fleetdeck holders`, attacked: a folder nested thousands deep (a hostile layout: the walk is
bounded, never a crash), a path whose holders do not fit one answer (refused, or each holder's
uses cut to its first with the rest counted), and the stderr line for a folder not indexed whole."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from support.deep_tree import _nest, _unnest

HOLD = """
import os, sys, time
top, ready, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
kept = [open(os.path.join(top, "shard-%03d-" % i + "x" * 150), "rb") for i in range(n)]
os.chdir(top)
open(ready, "w").write("ready")
while True:
    time.sleep(0.2)
"""


def _holder(children, top, ready, n=0):
    p = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(top), str(ready), str(n)], start_new_session=True, cwd="/"
    )
    children.append(p)
    deadline = time.monotonic() + 60
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ready.exists()
    return p.pid


@pytest.mark.sshd
def test_a_folder_nested_thousands_deep_is_walked_bounded_and_its_holder_found(
    spare_fleet, tmp_path, children
):
    top = tmp_path / "run-deep"
    (top / "a").mkdir(parents=True)
    (top / "b").mkdir()
    _nest(top / "a", 1200)
    try:
        _deep_walked(spare_fleet, tmp_path, children, top)
    finally:
        _unnest(top / "a")
    assert not (top / "a" / "d").exists()


def _deep_walked(spare_fleet, tmp_path, children, top):
    pid = _holder(children, top / "b", tmp_path / "ready")
    spare_fleet.add("hdeep")
    fleet = spare_fleet.write_fleet(tmp_path / "hosts.toml")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "fleetdeck.cli.main",
            "--hosts",
            str(fleet),
            "holders",
            "hdeep",
            str(top),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr and "RecursionError" not in out.stderr
    doc = json.loads(out.stdout)
    assert doc["complete"] is False
    assert {"how": "cwd", "file": str(top / "b")} in {h["pid"]: h for h in doc["holders"]}[pid][
        "uses"
    ]
    assert "was not indexed whole" in out.stderr and "deeper than the walk goes" in out.stderr


def test_holders_that_do_not_fit_one_answer_are_refused_or_cut_to_their_first_use(
    tmp_path, children, monkeypatch
):
    from fleetdeck.backend.host import holders as holders_remote
    from fleetdeck.backend.host.lib.serve import dispatch

    top = tmp_path / "run-wide"
    top.mkdir()
    for i in range(25):
        (top / (f"shard-{i:03d}-" + "x" * 150)).write_bytes(b"w")
    pids = {_holder(children, top, tmp_path / f"ready{k}", n=25) for k in range(2)}
    req = {"op": "holders", "path": str(top)}
    monkeypatch.setattr(holders_remote, "MAX_HOLDERS", 1, raising=False)
    ans = dispatch({"holders": holders_remote.holders}, req)
    assert ans["ok"] is False and ans["error"]["code"] == "too-many", ans
    assert "2 processes hold a file under" in ans["error"]["message"]
    monkeypatch.setattr(holders_remote, "MAX_HOLDERS", 4096, raising=False)
    monkeypatch.setattr(holders_remote, "ANSWER_BUDGET", 3000, raising=False)
    ans = dispatch({"holders": holders_remote.holders}, req)
    assert ans["ok"], ans
    by_pid = {h["pid"]: h for h in ans["holders"]}
    for pid in pids:
        # 25 descriptors and a cwd: one use kept, the other 25 counted
        assert len(by_pid[pid]["uses"]) == 1 and by_pid[pid]["more_uses"] == 25, by_pid[pid]
    monkeypatch.setattr(holders_remote, "ANSWER_BUDGET", 100, raising=False)
    ans = dispatch({"holders": holders_remote.holders}, req)
    assert ans["ok"] is False and ans["error"]["code"] == "too-big", ans
