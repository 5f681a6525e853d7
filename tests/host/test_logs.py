"""`fleetdeck logs`: a run's train.log from a real sshd host, its tail and then what is appended,
escaped for the terminal, bounded, and never through a symlink."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.sshd


def _cli(fleet_path, *args):
    return [sys.executable, "-m", "fleetdeck.cli.main", "--hosts", str(fleet_path), "logs", *args]


def test_logs_prints_the_last_lines_escaped(spare_fleet, tmp_path):
    h = spare_fleet.add("lg")
    run = h.runs / "run-7"
    run.mkdir()
    (run / "train.log").write_bytes(
        b"".join(b"line %d\n" % i for i in range(100))
        + b"\x1b]52;c;SGVsbG8=\x07osc\n\x1b[2Jclear\tthen tab\nbad \xff byte\n"
    )
    path = spare_fleet.write_fleet(tmp_path / "hosts.toml")
    out = subprocess.run(
        _cli(path, "lg", "run-7", "-n", "4"),
        capture_output=True,
        timeout=120,
        env={**os.environ, "PYTHONIOENCODING": "utf-8:strict"},
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.decode().splitlines()
    assert lines[:2] == ["line 99", "\\x1b]52;c;SGVsbG8=\\x07osc"] and lines[3] == "bad \\xff byte"
    assert lines[2].startswith("\\x1b[2Jclear ") and lines[2].endswith(
        " then tab"
    )  # a tab is spaces
    assert b"\x1b" not in out.stdout and b"\x07" not in out.stdout
    # by path, too
    out = subprocess.run(
        _cli(path, "lg", str(run), "-n", "1"), capture_output=True, text=True, timeout=120
    )
    assert out.stdout == "bad \\xff byte\n", (out.returncode, out.stderr)


def test_logs_refuses_a_missing_run_a_missing_log_and_a_symlinked_log(spare_fleet, tmp_path):
    h = spare_fleet.add("lr")
    (h.runs / "run-1").mkdir()
    (h.runs / "run-2").mkdir()
    secret = tmp_path / "secret"
    secret.write_text("do not show\n")
    (h.runs / "run-2" / "train.log").symlink_to(secret)
    path = spare_fleet.write_fleet(tmp_path / "hosts.toml")
    for run, code, words in (
        ("run-9", "no-run", "no run folder"),
        ("run-1", "no-log", "no train.log"),
        ("run-2", "not-a-file", "symlink"),
        ("../x", "no-run", "not ../x"),
    ):
        out = subprocess.run(_cli(path, "lr", run), capture_output=True, text=True, timeout=120)
        assert out.returncode == 2, (run, out.stderr)
        assert f"({code})" in out.stderr and words in out.stderr, (run, out.stderr)
        assert "do not show" not in out.stdout + out.stderr
        assert "Traceback" not in out.stderr


def test_logs_follow_prints_appended_lines_joins_split_characters_and_survives_truncation(
    spare_fleet, tmp_path
):
    h = spare_fleet.add("lf")
    run = h.runs / "run-f"
    run.mkdir()
    log = run / "train.log"
    log.write_text("old 1\nold 2\n")
    path = spare_fleet.write_fleet(tmp_path / "hosts.toml")
    p = subprocess.Popen(
        _cli(path, "lf", "run-f", "-f", "-n", "1"), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        assert p.stdout.readline() == b"old 2\n"
        with open(log, "ab") as f:
            f.write(b"new \xe2\x82")  # a euro sign cut in two writes
            f.flush()
            time.sleep(1.2)
            f.write(b"\xac euro\n")
        assert p.stdout.readline().decode() == "new € euro\n"
        log.write_text("")  # truncated (as by a restart that reopened it)
        time.sleep(1.2)
        with open(log, "a") as f:
            f.write("after\n")
        assert b"truncated or replaced" in p.stdout.readline()
        assert p.stdout.readline() == b"after\n"
    finally:
        p.terminate()
        p.wait(30)
    # the reader on the host went with its channel
    time.sleep(1)
    from support.sshfleet import _descendants

    left = [
        q
        for q in _descendants(spare_fleet.hosts["lf"].proc.pid)
        if b"logs_remote" in open(f"/proc/{q}/cmdline", "rb").read()
        or b"fleetdeck-helper" in open(f"/proc/{q}/cmdline", "rb").read()
    ]
    assert not left


def test_a_symlink_swapped_in_while_following_ends_the_follow_with_one_sentence(
    spare_fleet, tmp_path
):
    """train.log replaced by a symlink (renamed over it, as a log rotation would) while `-f`
    follows it: the follow ends with one sentence (code symlink, exit 2), no traceback, and
    nothing of the link's target is read. (The reader closed its descriptor twice: EBADF.)"""
    h = spare_fleet.add("ls")
    run = h.runs / "run-s"
    run.mkdir()
    log = run / "train.log"
    log.write_text("before the swap\n")
    secret = tmp_path / "secret"
    secret.write_text("SECRET-TARGET 1\n")
    path = spare_fleet.write_fleet(tmp_path / "hosts.toml")
    p = subprocess.Popen(
        _cli(path, "ls", "run-s", "-f", "-n", "1"), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        assert p.stdout.readline() == b"before the swap\n"
        (run / "train.log.new").symlink_to(secret)
        os.rename(run / "train.log.new", log)
        with open(secret, "a") as f:
            f.write("SECRET-TARGET 2\n")
        rc = p.wait(60)
        out, err = p.stdout.read().decode(), p.stderr.read().decode()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(30)
    assert rc == 2, (rc, err)
    assert "Traceback" not in err and "SECRET" not in out + err, err
    lines = err.strip().splitlines()
    assert (
        len(lines) == 1
        and lines[0].startswith("fleetdeck: ls: ")
        and lines[0].endswith("(symlink)")
    ), err
    assert "replaced by a symlink" in lines[0]


def test_n_lines_over_undecodable_bytes_returns_what_fits_and_says_what_it_cut(
    spare_fleet, tmp_path
):
    """3000 lines of bytes that are not UTF-8 (each byte travels as six characters, \\udcff):
    `-n 10000` is not refused as too large; the last lines that fit in one answer are shown,
    after one line saying how many earlier lines (and bytes) were left out."""
    h = spare_fleet.add("lb")
    run = h.runs / "run-b"
    run.mkdir()
    (run / "train.log").write_bytes(
        b"".join(b"%04d " % i + b"\xff" * 75 + b"\n" for i in range(3000)) + b"the last line\n"
    )
    path = spare_fleet.write_fleet(tmp_path / "hosts.toml")
    out = subprocess.run(
        _cli(path, "lb", "run-b", "-n", "10000"), capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
    lines = out.stdout.splitlines()
    head, shown_lines = lines[0], lines[1:]
    assert head.startswith("-- ") and "not shown" in head, head
    cut = 3001 - len(shown_lines)
    assert 0 < cut < 3001 and f"{cut} earlier lines ({cut * 81} bytes of train.log)" in head, head
    assert shown_lines[-1] == "the last line"
    assert (
        shown_lines[0] == f"{cut:04d} " + "\\xff" * 75
    )  # whole lines, the first one after the cut
    assert len(shown_lines) > 1500  # most of what one answer can carry


def test_a_line_longer_than_one_answer_is_shown_by_its_end():
    """Not even the last line fits as it travels: its end does, and the cut says so."""
    import json

    from fleetdeck.backend.host.logs import fit

    long = b"\xff\x00\x1b" * 20000 + b"tail"
    text, cut = fit([b"earlier", long], budget=30000)
    assert cut == {
        "lines": 1,
        "bytes": len(b"earlier") + 1 + len(long) - len(os.fsencode(text)),
        "partial": True,
    }
    assert text.endswith("tail") and len(json.dumps(text)) - 2 <= 30000
    assert len(json.dumps(text)) - 2 > 30000 - 12  # as much of it as fits
    assert os.fsencode(text) == long[-len(os.fsencode(text)) :]


def test_a_progress_bar_line_is_shown_as_the_terminal_showed_it():
    from fleetdeck.backend.fleet.logs import _split, as_shown

    bar = b"\r  0%|#  | 6/2000 [00:06<00:10,  0.50s/it]\r  0%|#  | 7/2000 [00:07<00:10,  0.50s/it]"
    assert as_shown(bar) == b"  0%|#  | 7/2000 [00:07<00:10,  0.50s/it]"
    assert as_shown(b"plain") == b"plain" and as_shown(b"done\r") == b"done"
    assert _split(bar + b"\n{'loss': 2.9}\n") == [
        "  0%|#  | 7/2000 [00:07<00:10,  0.50s/it]",
        "{'loss': 2.9}",
    ]
