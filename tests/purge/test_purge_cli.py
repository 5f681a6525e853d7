"""The purge command on this machine: the plan before any question, a wrong --confirm said to
not match (both shown escaped) and recorded as typed, non-UTF-8 names kept exact in the audit
log and shown escaped by `fleetdeck audit`, never a traceback."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import threading
from pathlib import Path

from fleetdeck.backend.actions import audit
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.host.lib.units import size_short
from fleetdeck.backend.host.purge.verdict import CHECKS

from support.purge import ckpt, cli, make_run


def test_wrong_confirm_says_did_not_match_shows_both_and_is_audited(fleet, capsys):
    f, runs = fleet
    p = str(ckpt(make_run(runs, "run\nnl 'q'")))
    wrong = p[:-1] + "\t"
    rc, out, err = cli(capsys, "--hosts", str(f), "purge", "local", p, f"--confirm={wrong}")
    assert rc == 1 and Path(p).is_dir()
    assert err.count("\n") == 1 and "did not match" in err
    assert (
        f"'{shown(wrong)}' did not match '{shown(p)}'" in err and "\\t" in err and "run\\nnl" in err
    )
    rec = [r for r in audit.read_audit() if r["action"] == "purge"][-1]
    assert rec["result"] == "refused"
    assert rec["confirmation"]["paths"] == [{"path": p, "typed": wrong, "matched": False}]
    rc, out, _ = cli(capsys, "audit", "--details")
    assert rc == 0 and f"typed {shown(wrong)} for {shown(p)}: did not match" in out


def test_plan_is_shown_before_the_deletion(fleet, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    f, runs = fleet
    p = str(ckpt(make_run(runs, "run-plan")))
    size = size_short(sum(x.stat().st_size for x in Path(p).iterdir()))
    rc, out, err = cli(capsys, "--hosts", str(f), "purge", "local", p, f"--confirm={p}")
    assert rc == 0, err
    plan_at, report_at = out.index("purge plan on local"), out.index("purge on local")
    assert plan_at < out.index(f"checks: {len(CHECKS)} passed") < out.index("keepers") < report_at
    assert size in out[:report_at] and "adapter_model.safetensors" in out[:report_at]
    # the table's bytes are the files' sizes; what comes back is counted in disk blocks: both named
    assert "file bytes" in out[:report_at]
    assert f"of disk blocks (the files' sizes add up to {size})" in out[:report_at]


def _read_all(fd: int, sink: list[bytes]) -> None:
    while True:
        try:
            b = os.read(fd, 4096)
        except OSError:
            return
        if not b:
            return
        sink.append(b)


def test_terminal_prompt_comes_after_the_plan(fleet):
    f, runs = fleet
    p = str(ckpt(make_run(runs, "run-prompt")))
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fleetdeck.cli.main",
            "--hosts",
            str(f),
            "purge",
            "local",
            p,
            "--json",
        ],
        stdin=slave,
        stdout=subprocess.PIPE,
        stderr=slave,
    )
    os.close(slave)
    seen: list[bytes] = []
    reader = threading.Thread(target=_read_all, args=(master, seen), daemon=True)
    reader.start()
    os.write(master, p.encode() + b"\n")
    out, _ = proc.communicate(timeout=120)
    reader.join(10)
    os.close(master)
    term = b"".join(seen).decode("utf-8", "replace")
    assert proc.returncode == 0, term
    assert json.loads(out)["deleted"] is True
    asked = term.index("Type the path")
    assert term.index("purge plan on local") < term.index("checks:") < term.index("keepers") < asked


def test_non_utf8_names_are_kept_exact_and_shown_escaped(fleet, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    f, runs = fleet
    raw = os.fsencode(str(runs)) + b"/run-\xff\xfe"
    run = Path(os.fsdecode(raw))
    make_run(run.parent, run.name)
    p = str(ckpt(run))
    rc, out, err = cli(capsys, "--hosts", str(f), "purge", "local", p, f"--confirm={p}", "--json")
    assert rc == 0, err
    assert not os.path.exists(os.fsencode(p))
    # another action's record with undecodable bytes never breaks the log either
    audit.audit("schedule-remove", "local", "refused", schedule={"command": "cp -r /x/\udcff /y"})
    rc, out, err = cli(capsys, "audit", "--json")
    assert rc == 0 and "Traceback" not in err
    entries = json.loads(out)["entries"]
    assert entries[1]["paths"][0]["path"] == p  # exact: the surrogate-escaped bytes come back
    rc, out, err = cli(capsys, "audit")
    assert rc == 0 and "run-\\xff\\xfe" in out and "/x/\\xff" in out
    assert "{" not in out, "records are read as text, not JSON"
    assert "1 of 1 deleted" in out and "keeper(s) verified" in out
    rc, out, err = cli(capsys, "audit", "--details")
    assert rc == 0 and "run-\\xff\\xfe" in out and "verified" in out and "Traceback" not in err


def test_an_extra_confirm_that_matches_no_path_is_refused_and_nothing_is_deleted(fleet, capsys):
    f, runs = fleet
    p = str(ckpt(make_run(runs, "run-extra")))
    other = str(runs / "run-elsewhere" / "checkpoints" / "checkpoint-9")
    rc, out, err = cli(
        capsys, "--hosts", str(f), "purge", "local", p, f"--confirm={p}", f"--confirm={other}"
    )
    assert rc == 2 and Path(p).is_dir()
    assert f"--confirm {shown(other)} matches no path of this purge; nothing was deleted" in err
    assert not [r for r in audit.read_audit() if r["action"] == "purge" and r["result"] == "done"]
