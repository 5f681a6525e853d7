"""`fleetdeck logs --grep PATTERN`: only the matching lines, the last N of them found on the
host in a bounded end of the log, escaped as every other line; a bad pattern is exit 2."""

from __future__ import annotations

import os
import re
import subprocess
import sys


def _cli(fleet_path, *args):
    return [sys.executable, "-m", "fleetdeck.cli.main", "--hosts", str(fleet_path), "logs", *args]


def _fleet(tmp_path):
    root = tmp_path / "runs"
    (root / "run-3").mkdir(parents=True)
    fleet = tmp_path / "hosts.toml"
    fleet.write_text(f'[hosts.here]\nlocal = true\nruns = ["{root}"]\n')
    return fleet, root / "run-3" / "train.log"


def test_grep_prints_the_last_matching_lines_escaped(tmp_path):
    fleet, log = _fleet(tmp_path)
    # far more lines than a plain tail reads (256 KiB): the first match is 1 MB back
    body = b"Traceback (most recent call last): first \x1b]52;c;SGVsbG8=\x07\n"
    body += b"".join(b"step %d loss 1.%04d\n" % (i, i) for i in range(60000))
    body += b"RuntimeError: bad \xff byte\nstep 60001 loss nan\n"
    log.write_bytes(body)
    out = subprocess.run(
        _cli(fleet, "here", "run-3", "--grep", "Traceback|Error|nan", "-n", "5"),
        capture_output=True,
        timeout=120,
        env={**os.environ, "PYTHONIOENCODING": "utf-8:strict"},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.decode().splitlines() == [
        "Traceback (most recent call last): first \\x1b]52;c;SGVsbG8=\\x07",
        "RuntimeError: bad \\xff byte",
        "step 60001 loss nan",
    ]
    assert b"\x1b" not in out.stdout and b"\x07" not in out.stdout
    # -n bounds the matches: the last two
    out = subprocess.run(
        _cli(fleet, "here", "run-3", "--grep", "(?i)TRACEBACK|nan$", "-n", "1"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.stdout == "step 60001 loss nan\n", out.stderr
    # no match: nothing printed, and done
    out = subprocess.run(
        _cli(fleet, "here", "run-3", "--grep", "zebra"), capture_output=True, text=True, timeout=120
    )
    assert (out.returncode, out.stdout) == (0, ""), out.stderr


def test_a_bad_pattern_is_exit_2_with_a_sentence_before_any_host_is_asked(tmp_path):
    fleet, _ = _fleet(tmp_path)
    out = subprocess.run(
        _cli(fleet, "nosuchhost", "run-3", "--grep", "loss ("),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2
    assert "is not a regular expression" in out.stderr and "Traceback" not in out.stderr


def test_the_host_reads_a_bounded_end_of_the_log_and_matches_a_line_without_end_in_pieces(
    tmp_path, monkeypatch
):
    from fleetdeck.backend.host import logs

    monkeypatch.setattr(logs, "GREP_BYTES", 4096)
    monkeypatch.setattr(logs, "GREP_LINE", 1000)
    path = tmp_path / "train.log"
    path.write_bytes(
        b"error early\n" + b"x" * 5000 + b"\n" + b"step error late\n" + b"y" * 2500 + b"error"
    )
    fd = os.open(path, os.O_RDONLY)
    try:
        text, offset, cut, read = logs.grep_tail(fd, os.fstat(fd).st_size, 10, re.compile("error"))
    finally:
        os.close(fd)
    assert read == 4096 and offset == os.path.getsize(path)
    lines = text.split("\n")
    assert "error early" not in lines  # beyond the bytes read
    assert lines[0] == "step error late" and lines[-1].endswith("error") and len(lines[-1]) <= 1000
