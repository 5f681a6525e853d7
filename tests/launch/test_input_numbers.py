"""Numbers in RUN.toml are finite and in range before anything starts: `fleetdeck train`, `bench`
and `launch` (over a real sshd host) exit 2 naming the key and the value, and leave no run
folder and no process behind. TOML itself reads `inf`, `nan` and `1e400` (as inf)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fleetdeck.backend.actions.audit import read_audit
from fleetdeck.backend.fleet.config import ConfigError
from fleetdeck.backend.train.runconfig import RUN_NUMBERS, parse_run_config
from fleetdeck.cli.main import main

REQUIRED = 'name = "t"\nbase_model = "random:tiny"\ncorpus = "/c"\noutput = "/o"\n'

BAD = [
    ("lr = inf", "lr = inf is not a finite number"),
    ("lr = 1e400", "lr = inf is not a finite number"),  # TOML reads the typo as inf
    ("lr = nan", "lr = nan is not a finite number"),
    ("lr = 3e-4e", None),  # not TOML at all
    ("lr = 2.0", "lr = 2.0 is out of range: key 'lr' must be greater than 0 and below 1"),
    (
        "max_steps = -5",
        "max_steps = -5 is out of range: key 'max_steps' must be between 0 and 1000000000",
    ),
    ("max_steps = true", "key 'max_steps' must be an integer, not true"),
    ("max_steps = 2e3", "key 'max_steps' must be an integer, not 2000.0"),
    ("batch_size = 0", "batch_size = 0 is out of range: key 'batch_size' must be greater than 0"),
    ("epochs = inf", "epochs = inf is not a finite number"),
    (
        "warmup_steps = 99999999999999999999999",
        "warmup_steps = (an integer of 23 digits) is out of range",
    ),
    (
        "eval_fraction = -0.0",
        "eval_fraction = -0.0 is out of range: key 'eval_fraction' must be between 0 and 0.5 "
        "(a signed zero is not taken: write 0)",
    ),
    (
        "eval_fraction = 0.9",
        "eval_fraction = 0.9 is out of range: key 'eval_fraction' must be between 0 and 0.5",
    ),
]


def process_naming(text: str) -> list[int]:
    """Pids of processes whose command line holds `text`."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if text.encode() in f.read():
                    out.append(int(pid))
        except OSError:
            pass
    return out


def run_toml(tmp_path: Path, output: Path, line: str) -> Path:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": f"document {i} " * 8}) + "\n" for i in range(20)))
    toml = tmp_path / "RUN.toml"
    toml.write_text(
        f'name = "t"\nbase_model = "random:tiny"\ncorpus = "{corpus}"\noutput = "{output}"\n'
        f"seq_len = 32\nbatch_size = 2\ngrad_accum = 1\nmax_steps = 3\nsave_steps = 2\n"
        f"eval_steps = 2\n"
    )
    key = line.split(" =")[0]
    kept = [x for x in toml.read_text().splitlines() if not x.startswith(f"{key} =")]
    toml.write_text("\n".join([*kept, line]) + "\n")
    return toml


@pytest.mark.parametrize("line, said", BAD)
def test_train_and_bench_exit_2_and_start_nothing(tmp_path, capsys, line, said):
    out = tmp_path / "runs" / "r1"
    toml = run_toml(tmp_path, out, line)
    for cmd in (["train", str(toml)], ["bench", str(toml), "--steps", "1", "--warmup", "0"]):
        assert main(cmd) == 2, cmd
        err = capsys.readouterr().err
        assert f"{toml}: " in err and (said or "not valid TOML") in err and "Traceback" not in err
        assert not out.exists() and not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "value, said",
    [("inf", "lr = inf is not a finite number"), ("true", "key 'lr' must be a number, not true")],
)
def test_bench_set_is_checked_the_same_way(tmp_path, capsys, value, said):
    toml = run_toml(tmp_path, tmp_path / "runs" / "r1", "lr = 1e-4")
    assert main(["bench", str(toml), "--set", f"lr={value}"]) == 2
    assert said in capsys.readouterr().err


@pytest.mark.sshd
@pytest.mark.parametrize("line, said", [b for b in BAD if b[1]])
def test_launch_exits_2_and_starts_nothing_on_the_host(sshd_fleet, tmp_path, capsys, line, said):
    fleet = sshd_fleet.write_fleet(tmp_path / "hosts.toml", names=["h1"])
    out = sshd_fleet.hosts["h1"].runs / f"numbers-{abs(hash(line))}"
    toml = run_toml(tmp_path, out, line)
    for extra in ([], ["--json"]):
        assert main(["--hosts", str(fleet), "launch", "h1", str(toml), *extra]) == 2
        got = capsys.readouterr()
        assert f"{toml}: {said}" in got.err and got.out == "" and "Traceback" not in got.err
    assert not out.exists() and process_naming(str(out)) == []
    assert read_audit() == []  # nothing was asked of the host


@pytest.mark.parametrize("key", sorted(RUN_NUMBERS))
@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "1e400", "true"])
def test_every_number_key_refuses_non_finite_values_and_booleans(key, value):
    with pytest.raises(ConfigError) as e:
        parse_run_config(REQUIRED + f"{key} = {value}\n", "RUN.toml")
    msg = str(e.value)
    assert (
        msg.startswith("RUN.toml: ")
        and key in msg
        and ("not a finite number" in msg or "must be" in msg)
    )


@pytest.mark.parametrize("key", sorted(RUN_NUMBERS))
def test_every_number_key_takes_its_range_edges_and_refuses_past_them(key):
    b = RUN_NUMBERS[key]
    step = 1 if b.integer else 1e-9
    inside = [b.low + (step if b.above else 0), b.high - (step if b.below else 0)]
    outside = [b.low - (0 if b.above else step), b.high + (0 if b.below else step)]
    for v in inside:
        v = int(v) if b.integer else float(v)
        parse_run_config(REQUIRED + f"{key} = {v!r}\n", "RUN.toml")
    for v in outside:
        v = int(v) if b.integer else float(v)
        with pytest.raises(ConfigError, match=f"{key} = .* is out of range: key '{key}' must be"):
            parse_run_config(REQUIRED + f"{key} = {v!r}\n", "RUN.toml")


EATS_LAUNCH_ANSWERS = """#!/bin/sh
# the host's python, except that a one-shot launch helper's answer (the one with its checks)
# never comes back; anything else it prints (a payload-cache miss) still does
case " $* " in *" --tied "*) ;; *) exec {py} "$@";; esac
req=$(mktemp)
out=$(mktemp)
cat > "$req"
{py} "$@" < "$req" > "$out"
rc=$?
if grep -q '{{"op": "launch"' "$req" && grep -q '"checks"' "$out"; then rc=0; else cat "$out"; fi
rm -f "$req" "$out"
exit $rc
"""


@pytest.mark.sshd
def test_a_launch_whose_answer_is_lost_reports_what_the_host_does(sshd_fleet, tmp_path, capsys):
    """The launch helper starts the run but its answer never arrives (what a non-finite number
    in the answer used to do): launch asks the probe and reports the run running, not failed."""
    pytest.importorskip("transformers")
    import signal
    import sys

    wrapper = tmp_path / "python-eats-launch-answers"
    wrapper.write_text(EATS_LAUNCH_ANSWERS.format(py=sys.executable))
    wrapper.chmod(0o755)
    fleet = sshd_fleet.write_fleet(
        tmp_path / "hosts.toml", names=["h1"], per_host={"h1": {"python": str(wrapper)}}
    )
    out = sshd_fleet.hosts["h1"].runs / "lost-answer"
    toml = run_toml(tmp_path, out, "max_steps = 100000")
    toml.write_text(
        toml.read_text()
        .replace("save_steps = 2", "save_steps = 100000")
        .replace("eval_steps = 2", "eval_steps = 100000")
    )
    try:
        rc = main(["--hosts", str(fleet), "launch", "h1", str(toml), "--json"])
        got = capsys.readouterr()
        doc = json.loads(got.out)
        run = json.loads((out / "run.json").read_text())
        assert rc == 0, got.err
        assert (
            doc["state"] == "running" and doc["run_path"] == str(out) and doc["pid"] == run["pid"]
        )
        assert "answer was lost" in doc["warning"] and "answer was lost" in got.err
        (rec,) = [r for r in read_audit() if r["action"] == "launch"]
        assert rec["result"] == "started" and rec["pid"] == run["pid"]
    finally:
        for pid in process_naming(str(out)):  # the waiter and the trainer it started
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.mark.parametrize(
    "value, taken",
    [
        ("0", True),
        ("0.0", True),
        ("-0.0", False),
        ("1e-9", True),
        ("0.5", True),
        ("0.5000001", False),
        ("0.99", False),
        ("-0.1", False),
    ],
)
def test_eval_fraction_is_none_or_a_share_up_to_half(value, taken):
    """0 keeps its documented meaning (no eval split); a share is at most half the documents."""
    text = REQUIRED + f"eval_fraction = {value}\n"
    if taken:
        assert parse_run_config(text, "RUN.toml").eval_fraction == abs(float(value))
    else:
        with pytest.raises(
            ConfigError,
            match=r"^RUN.toml: eval_fraction = .* is out of range: key 'eval_fraction' "
            r"must be between 0 and 0.5",
        ):
            parse_run_config(text, "RUN.toml")


@pytest.mark.parametrize("key", ["name", "base_model", "corpus", "output", "tokenizer"])
@pytest.mark.parametrize("ch", ["\x1b", "\x00", "\n", "\x9b", "\u202e"])
def test_run_toml_names_and_paths_with_control_characters_are_refused(key, ch):
    lines = [x for x in REQUIRED.splitlines() if not x.startswith(f"{key} =")]
    text = "\n".join([*lines, f'{key} = "/x\\u{ord(ch):04x}[2J"']) + "\n"
    with pytest.raises(ConfigError) as e:
        parse_run_config(text, "RUN.toml")
    msg = str(e.value)
    assert msg.startswith(f'RUN.toml: key {key!r} must not hold control characters: "/x')
    assert ch not in msg and msg.isprintable()


def test_train_exits_2_on_an_escape_in_the_output_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "runs" / "r1"
    toml = run_toml(tmp_path, out, "seed = 1")
    toml.write_text(toml.read_text().replace(f'output = "{out}"', f'output = "{out}\\u001b[2J"'))
    assert main(["train", str(toml)]) == 2
    err = capsys.readouterr().err
    assert f"{toml}: key 'output' must not hold control characters" in err and "\x1b" not in err
    assert not (tmp_path / "runs").exists()
