"""`fleetdeck rules --prometheus`: the built-in rules as a Prometheus alerting-rules file that
Debian's `promtool` accepts (`check rules`) and that fires each rule it expresses, with the
same name, severity, subject and `for`, on series chosen for it (`test rules`, a unit-test file
written here); the fleet file's thresholds, severities, `for` and disabled rules reach it; and
a real Prometheus scraping a real `fleetdeck watch --prometheus` on loopback sees a rule fire."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleetdeck.backend.fleet.alert_rules import RULES, AlertConfig, parse_alerts
from fleetdeck.backend.fleet.models import Run
from fleetdeck.backend.monitor.metrics.rules import EXPRESSED, expressed, rules_file, run_figures
from fleetdeck.backend.monitor.rules.alerts import AlertEngine

from support.promstack import PROMETHEUS, answers, free_port, get_json, need, promtool, wait_for

WATCH = [sys.executable, "-m", "fleetdeck.cli.main"]
H = 'host="h1"'
RUN = f'{H},run="run-1",path="/r/run-1"'
RUN_LABELS = {"host": "h1", "run": "run-1", "path": "/r/run-1", "subject": "/r/run-1"}
GPU0 = f'{H},gpu="0",uuid="GPU-a"'
GPU0_LABELS = {"host": "h1", "gpu": "0", "uuid": "GPU-a", "subject": "GPU0"}

#: rule -> (input series {series: values}, eval time, the alerts expected then [(labels, annotations)]);
#: series that must not fire sit beside those that must (promtool wants the exact set)
CASES = {
    "host-down": (
        {'fleetdeck_host_up{host="h1"}': "0x15 1x15", 'fleetdeck_host_up{host="h2"}': "1x30"},
        "10m",
        [
            (
                {"host": "h1", "subject": "h1"},
                {
                    "summary": "host h1 is down",
                    "description": "h1 has not answered fleetdeck's polls",
                },
            )
        ],
    ),
    "run-stalled": (
        {
            f'fleetdeck_run_state{{{RUN},state="stalled"}}': "1x14",
            f'fleetdeck_run_state{{{RUN},state="running"}}': "_x15 1x15",
            'fleetdeck_run_state{host="h1",run="run-2",path="/r/run-2",state="running"}': "1x30",
        },
        "10m",
        [
            (
                {**RUN_LABELS, "state": "stalled"},
                {
                    "summary": "run run-1 on h1 is stalled",
                    "description": "run run-1 on h1 (/r/run-1) makes no progress",
                },
            )
        ],
    ),
    "loss-nonfinite": (
        {
            f"fleetdeck_run_loss_nonfinite{{{RUN}}}": "1x15 0x15",
            'fleetdeck_run_loss_nonfinite{host="h1",run="ok",path="/r/ok"}': "0x30",
        },
        "10m",
        [
            (
                RUN_LABELS,
                {
                    "summary": "run run-1 on h1 logged a non-finite loss",
                    "description": "run run-1 on h1 logged a NaN or infinite loss or eval loss",
                },
            )
        ],
    ),
    "loss-spike": (
        {
            f"fleetdeck_run_loss_spike_ratio{{{RUN}}}": "4x15 1x15",
            'fleetdeck_run_loss_spike_ratio{host="h1",run="ok",path="/r/ok"}': "1.2x30",
        },
        "10m",
        [
            (
                RUN_LABELS,
                {
                    "summary": "run run-1 on h1: loss spike",
                    "description": "run run-1 on h1: the last loss is 4.0x the median of the steps "
                    "before",
                },
            )
        ],
    ),
    "overfitting": (
        {
            f"fleetdeck_run_eval_loss_rises{{{RUN}}}": "2x15 0x15",
            'fleetdeck_run_eval_loss_rises{host="h1",run="ok",path="/r/ok"}': "1x30",
        },
        "10m",
        [
            (
                RUN_LABELS,
                {
                    "summary": "run run-1 on h1 is overfitting",
                    "description": "run run-1 on h1: eval loss rose at 2 consecutive evals",
                },
            )
        ],
    ),
    # free space falls 1.8 GB a minute (30 MB/s) for 45 minutes: 1.08 TB left at 45m is 10 h;
    # then writing stops, free space flat: quiet 4 minutes later. A disk that fell in one burst
    # and then held still never fires
    "disk-full-eta": (
        {
            f'fleetdeck_disk_free_bytes{{{H},path="/r",mount="/"}}': "1161000000000-1800000000x45 1080000000000x30",
            f'fleetdeck_disk_free_bytes{{{H},path="/b",mount="/b"}}': "900000000000-50000000000x5 650000000000x55",
        },
        "45m",
        [
            (
                {"host": "h1", "path": "/r", "mount": "/", "subject": "/r"},
                {
                    "summary": "/r on h1 fills soon",
                    "description": "/r on h1 (/) fills in about 10h 0m 0s at the current rate",
                },
            )
        ],
    ),
    "gpu-headroom": (
        {
            f"fleetdeck_gpu_headroom_bytes{{{GPU0}}}": "1073741824x15 20000000000x15",
            f"fleetdeck_gpu_unified_memory{{{GPU0}}}": "0x30",
            f'fleetdeck_seat_gpu_memory_bytes{{{H},port="8000",kind="vllm",gpu="0"}}': "10000000000x30",
            # short too, but no seat on it: no alert
            f'fleetdeck_gpu_headroom_bytes{{{H},gpu="1",uuid="GPU-b"}}': "0x30",
            f'fleetdeck_gpu_unified_memory{{{H},gpu="1",uuid="GPU-b"}}': "0x30",
        },
        "10m",
        [
            (
                GPU0_LABELS,
                {
                    "summary": "GPU0 on h1 is short of memory for its seats",
                    "description": "GPU0 on h1 has 1GiB free, under the floor",
                },
            )
        ],
    ),
    "new-stray": (
        {
            'fleetdeck_schedules_stray{host="h1"}': "3x15 0x15",
            'fleetdeck_schedules_stray{host="h2"}': "0x30",
        },
        "10m",
        [
            (
                {"host": "h1", "subject": "h1"},
                {
                    "summary": "stray schedules on h1",
                    "description": "h1 holds 3 stray schedule(s): "
                    "`fleetdeck schedules --stray-only`",
                },
            )
        ],
    ),
    "seat-check": (
        {
            f'fleetdeck_seat_check_ok{{{H},port="8000",signature="logprob-nan"}}': "0x14",
            f'fleetdeck_seat_check_ok{{{H},port="8000",signature=""}}': "_x15 1x15",
            f'fleetdeck_seat_check_ok{{{H},port="8001",signature=""}}': "1x30",
        },
        "10m",
        [
            (
                {"host": "h1", "port": "8000", "signature": "logprob-nan", "subject": "port 8000"},
                {
                    "summary": "the seat on h1:8000 failed its check",
                    "description": "the seat on h1:8000 failed its check: logprob-nan",
                },
            )
        ],
    ),
    # restarted at 5m: firing 15 minutes (event_hold_minutes), then resolved (the 25m case below)
    "seat-restart": (
        {
            f'fleetdeck_seat_restarts{{{H},port="8000",kind="vllm"}}': "1x4 2x30",
            f'fleetdeck_seat_restarts{{{H},port="8001",kind="vllm"}}': "3x35",
        },
        "10m",
        [
            (
                {"host": "h1", "port": "8000", "kind": "vllm", "subject": "vllm:8000"},
                {
                    "summary": "seat vllm:8000 on h1 restarted",
                    "description": "seat vllm:8000 on h1 restarted (RestartCount 2)",
                },
            )
        ],
    ),
    "gpu-throttled": (
        {
            f'fleetdeck_gpu_throttle_reason{{{GPU0},reason="hw-thermal-slowdown"}}': "1x15 0x15",
            f'fleetdeck_gpu_throttle_reason{{{H},gpu="1",uuid="GPU-b",reason="sw-power-cap"}}': "1x30",
        },
        "10m",
        [
            (
                GPU0_LABELS,
                {
                    "summary": "GPU0 on h1 is slowed down",
                    "description": "GPU0 on h1 is held back by a hardware or thermal slowdown",
                },
            )
        ],
    ),
    "gpu-hot": (
        {
            f"fleetdeck_gpu_temperature_celsius{{{GPU0}}}": "87x15 70x15",
            f"fleetdeck_gpu_slowdown_temperature_celsius{{{GPU0}}}": "90x30",
            f'fleetdeck_gpu_temperature_celsius{{{H},gpu="1",uuid="GPU-b"}}': "60x30",
            f'fleetdeck_gpu_slowdown_temperature_celsius{{{H},gpu="1",uuid="GPU-b"}}': "90x30",
        },
        "10m",
        [
            (
                GPU0_LABELS,
                {
                    "summary": "GPU0 on h1 runs hot",
                    "description": "GPU0 on h1 is 3 °C from its slowdown threshold",
                },
            )
        ],
    ),
    "gpu-ecc": (
        {
            f'fleetdeck_gpu_ecc_uncorrected_errors{{{GPU0},counter="volatile"}}': "2x15 0x15",
            f'fleetdeck_gpu_ecc_uncorrected_errors{{{GPU0},counter="aggregate"}}': "5x30",
            f"fleetdeck_gpu_ecc_pending_retirement{{{GPU0}}}": "1x15 0x15",
            f'fleetdeck_gpu_ecc_uncorrected_errors{{{H},gpu="1",uuid="GPU-b",counter="volatile"}}': "0x30",
        },
        "10m",
        [
            (
                GPU0_LABELS,
                {
                    "summary": "GPU0 on h1 has memory errors",
                    "description": "GPU0 on h1: an uncorrected ECC error, a remap waiting for "
                    "a reset, or a failed remap",
                },
            )
        ],
    ),
    "gpu-xid": (
        {f'fleetdeck_gpu_xid_errors{{{GPU0},code="79"}}': "2x15 0x15"},
        "10m",
        [
            (
                {**GPU0_LABELS, "code": "79", "subject": "GPU0 Xid 79"},
                {
                    "summary": "GPU0 on h1 reported Xid 79",
                    "description": "GPU0 on h1 reported Xid 79 (2 time(s) in the probe's last hour)",
                },
            )
        ],
    ),
    "gpu-lost": (
        {
            f"fleetdeck_gpu_lost{{{GPU0}}}": "1x15 0x15",
            f'fleetdeck_gpu_lost{{{H},gpu="1",uuid="GPU-b"}}': "0x30",
        },
        "10m",
        [
            (
                GPU0_LABELS,
                {
                    "summary": "GPU0 on h1 is lost",
                    "description": "the driver lost GPU0 on h1: reset the card or reboot the host",
                },
            )
        ],
    ),
    "run-failed": (
        {
            # live until 4m, failed from 5m on: an event, firing 15 minutes (event_hold_minutes)
            f'fleetdeck_run_state{{{RUN},state="running"}}': "1x4",
            f'fleetdeck_run_state{{{RUN},state="failed"}}': "_x5 1x25",
            # first seen already failed: never fires
            'fleetdeck_run_state{host="h1",run="old",path="/r/old",state="failed"}': "1x30",
        },
        "10m",
        [
            (
                {**RUN_LABELS, "state": "failed"},
                {
                    "summary": "run run-1 on h1 failed",
                    "description": "run run-1 on h1 (/r/run-1) failed",
                },
            )
        ],
    ),
    "run-finished": (
        {
            f'fleetdeck_run_state{{{RUN},state="stalled"}}': "1x4",
            f'fleetdeck_run_state{{{RUN},state="finished"}}': "_x5 1x25",
            'fleetdeck_run_state{host="h1",run="old",path="/r/old",state="finished"}': "1x30",
        },
        "10m",
        [
            (
                {**RUN_LABELS, "state": "finished"},
                {
                    "summary": "run run-1 on h1 finished",
                    "description": "run run-1 on h1 (/r/run-1) finished",
                },
            )
        ],
    ),
}
#: later (or earlier) evaluations that must find nothing firing: every rule resolves once its
#: series say so (most turn sound at 16m), and one with a `for` is quiet before it has held
QUIET = {rule: ("25m",) for rule in CASES}
QUIET["host-down"] = ("1m", "25m")
QUIET["disk-full-eta"] = ("32m", "49m")


def unit_tests(rules: Path, config: AlertConfig) -> str:
    """promtool's unit-test file: one test group per expressed rule, on its own series."""
    tests = []
    for rule in expressed(config):
        series, at, alerts = CASES[rule]
        sev = config.severity_of(rule)
        checks = [
            {
                "eval_time": at,
                "alertname": rule,
                "exp_alerts": [
                    {"exp_labels": {**labels, "severity": sev}, "exp_annotations": notes}
                    for labels, notes in alerts
                ],
            }
        ]
        checks += [{"eval_time": t, "alertname": rule, "exp_alerts": []} for t in QUIET[rule]]
        tests.append(
            {
                "interval": "1m",
                "input_series": [{"series": s, "values": v} for s, v in series.items()],
                "alert_rule_test": checks,
            }
        )
    # JSON is YAML: promtool reads it as it is
    return json.dumps(
        {"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": tests}, indent=1
    )


def promtool_run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([promtool(), *args], capture_output=True, text=True, timeout=300)


def test_every_rule_is_either_expressed_or_said_not_to_be():
    text = rules_file()
    for rule in RULES:
        assert f"- alert: {rule}\n" in text or f"# {rule}: not expressed" in text, rule
    assert set(expressed()) <= set(CASES) <= set(EXPRESSED), (
        "a case for every rule the file expresses"
    )


def test_promtool_checks_the_file_and_each_rule_fires_on_its_series(tmp_path):
    fleet = tmp_path / "hosts.toml"
    fleet.write_text("[hosts.local]\nlocal = true\n")  # the built-in thresholds
    made = subprocess.run(
        [*WATCH, "--hosts", str(fleet), "rules", "--prometheus"], capture_output=True, text=True
    )
    assert made.returncode == 0, made.stderr
    rules = tmp_path / "fleetdeck.rules.yml"
    rules.write_text(made.stdout)
    check = promtool_run("check", "rules", str(rules))
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"SUCCESS: {len(expressed())} rules found" in check.stdout
    (tmp_path / "tests.yml").write_text(unit_tests(rules, AlertConfig()))
    run = promtool_run("test", "rules", str(tmp_path / "tests.yml"))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SUCCESS" in run.stdout


def test_the_fleet_files_alerts_table_reaches_the_file(tmp_path):
    fleet = tmp_path / "hosts.toml"
    fleet.write_text(
        "[hosts.local]\nlocal = true\n[alerts]\nhost_down_after = 300\nloss_spike_factor = 5\n"
        'gpu_headroom_floor_gib = 2\ndisabled = ["new-stray", "idle-holder"]\n'
        'for = {overfitting = 90, host-down = 60}\nseverity = {run-stalled = "critical"}\n'
    )
    done = subprocess.run(
        [*WATCH, "--hosts", str(fleet), "rules", "--prometheus"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    text = done.stdout
    cfg = parse_alerts(
        {
            "host_down_after": 300,
            "loss_spike_factor": 5,
            "gpu_headroom_floor_gib": 2,
            "disabled": ["new-stray", "idle-holder"],
            "for": {"overfitting": 90, "host-down": 60},
            "severity": {"run-stalled": "critical"},
        },
        "x",
    )
    block = {r: text.split(f"- alert: {r}\n", 1)[1].split("- alert:", 1)[0] for r in expressed(cfg)}
    assert "for: 360s" in block["host-down"]  # host_down_after and its for
    assert "fleetdeck_run_loss_spike_ratio > 5" in block["loss-spike"]
    assert f"< {2 * 2**30}" in block["gpu-headroom"]
    assert "for: 90s" in block["overfitting"]
    assert "severity: critical" in block["run-stalled"]
    assert "- alert: new-stray" not in text and "# new-stray: disabled" in text
    rules = tmp_path / "r.yml"
    rules.write_text(text)
    assert promtool_run("check", "rules", str(rules)).returncode == 0
    assert set(expressed(cfg)) == (set(EXPRESSED) & set(RULES)) - {"new-stray"}


def expand(values: str) -> list[float | None]:
    """promtool's series notation (`a`, `axn`, `a+bxn`, `a-bxn`, `_`, `_xn`), one value a minute."""
    out: list[float | None] = []
    for part in values.split():
        m = re.fullmatch(r"(_|-?[0-9.e]+)(?:([+-])([0-9.e]+))?(?:x([0-9]+))?", part)
        assert m, part
        first, sign, step, n = m.groups()
        if first == "_":
            out += [None] * int(n or 1)
            continue
        d = float(step or 0) * (-1 if sign == "-" else 1)
        out += [float(first) + d * i for i in range(int(n) + 1 if n else 1)]
    return out


def parse_series(series: str) -> tuple[str, dict[str, str]]:
    name, _, rest = series.partition("{")
    return name, dict(
        (k, v.strip('"')) for k, v in (x.split("=", 1) for x in rest.rstrip("}").split(","))
    )


def engine_firing(rule: str, minutes: int) -> dict[int, set[str]]:
    """The subjects fleetdeck's own engine has firing for `rule` at each minute, polled once a
    minute on the same series as the promtool case: a run's state series as its Run, a free
    space series as the disk behind its path (used = size - free)."""
    from fleetdeck.backend.fleet.models import Disk, FleetSnapshot, HostSnapshot

    series = [(*parse_series(k), expand(v)) for k, v in CASES[rule][0].items()]
    e, out, t0, size = AlertEngine(AlertConfig()), {}, 1_800_000_000.0, 2 * 10**12
    for m in range(minutes + 1):
        runs, disks = [], []
        for name, lab, vals in series:
            v = vals[m] if m < len(vals) else None
            if v is None:
                continue
            if name == "fleetdeck_run_state" and v == 1:
                runs.append(
                    Run(
                        host="h1",
                        path=lab["path"],
                        name=lab["run"],
                        state=lab["state"],
                        adapter=f"{lab['path']}/final_adapter"
                        if lab["state"] == "finished"
                        else None,
                    )
                )
            elif name == "fleetdeck_disk_free_bytes":
                free = int(v)
                disks.append(Disk(lab["path"], lab["mount"], "ext4", size, size - free, free))
        t = t0 + 60 * m
        h = HostSnapshot(name="h1", reachable=True, runs=tuple(runs), disks=tuple(disks), time=t)
        e.evaluate(FleetSnapshot(hosts=(h,), time=t), now=t)
        out[m] = {a.subject for a in e.firing() if a.rule == rule}
    return out


#: the evaluations at which the engine is held to promtool's verdict on the same series
#: (disk-full-eta: the engine needs `disk_rate_min_span` of samples where Prometheus needs the
#: whole window, so its wait for `for` ends sooner; both fire at 45m and both are quiet 4
#: minutes after writing stopped)
AGREE = {
    "run-finished": ("10m", "25m"),
    "run-failed": ("10m", "25m"),
    "disk-full-eta": ("45m", "49m"),
}


@pytest.mark.parametrize("rule", sorted(AGREE))
def test_the_engine_fires_and_resolves_as_the_promtool_case_says(rule):
    _series, at, alerts = CASES[rule]
    want = {at: {labels["subject"] for labels, _notes in alerts}}
    want.update({t: set() for t in QUIET[rule]})
    got = engine_firing(rule, max(int(t[:-1]) for t in AGREE[rule]))
    for t in AGREE[rule]:
        assert got[int(t[:-1])] == want[t], (rule, t, got)
    # an event fires once: the minutes it fires at are one stretch, never again
    fired = [m for m, subjects in got.items() if subjects]
    assert fired and fired == list(range(fired[0], fired[-1] + 1)), fired


def test_run_figures_agree_with_the_engines_verdicts():
    def run(losses=(), evals=()) -> Run:
        return Run(
            host="h",
            path="/r/x",
            name="x",
            state="running",
            losses=tuple(enumerate(losses)),
            eval_losses=tuple((25 * i, v) for i, v in enumerate(evals)),
        )

    for evals in (
        (3.2, 3.17, 3.18, 3.19),
        (3.2, 3.17, 3.18),
        (3.1, 3.2, 3.3, 3.1),
        (),
        (3.0,),
        (1, 2, 3, 4),
    ):
        rises = run_figures(run(evals=evals))[1]
        e = AlertEngine(AlertConfig())
        fired = any(a.rule == "overfitting" for a in e.evaluate(snapshot(run(evals=evals))))
        assert fired == (rises >= 2), (evals, rises)
    for losses in (
        (1.0,) * 5 + (4.0,),
        (1.0,) * 6 + (3.5,),
        (1.0,) * 20 + (2.9,),
        (1.0,) * 4 + (9.0,),
    ):
        ratio = run_figures(run(losses=losses))[2]
        e = AlertEngine(AlertConfig())
        fired = any(a.rule == "loss-spike" for a in e.evaluate(snapshot(run(losses=losses))))
        assert fired == (ratio is not None and ratio > 3.0), (losses, ratio)
    r = Run(host="h", path="/r/x", name="x", state="failed", reason="eval_loss is nan at step 50")
    assert run_figures(r)[0] == 1.0
    assert any(a.rule == "loss-nonfinite" for a in AlertEngine().evaluate(snapshot(r)))


def snapshot(r: Run):
    from fleetdeck.backend.fleet.models import FleetSnapshot, HostSnapshot

    return FleetSnapshot(
        hosts=(HostSnapshot(name="h", reachable=True, runs=(r,), time=time.time()),),
        time=time.time(),
    )


PROM_CONFIG = """global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - {rules}
scrape_configs:
  - job_name: fleetdeck
    static_configs:
      - targets: ["127.0.0.1:{port}"]
"""


def test_a_real_prometheus_scraping_watch_fires_a_rule(tmp_path):
    need(PROMETHEUS)
    run = tmp_path / "runs" / "run-1"
    run.mkdir(parents=True)
    rows = [
        {"step": 25 * (i + 1), "max_steps": 400, "loss": 3.0, "eval_loss": v, "time": time.time()}
        for i, v in enumerate((3.20, 3.17, 3.18, 3.19))
    ]
    (run / "progress.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    fleet = tmp_path / "hosts.toml"
    fleet.write_text(
        f'[hosts.local]\nlocal = true\npython = "{sys.executable}"\nruns = ["{run.parent}"]\n'
        '[alerts]\ndisabled = ["new-stray", "disk-full-eta", "idle-holder", "gpu-headroom"]\n'
    )
    rules = tmp_path / "fleetdeck.rules.yml"
    made = subprocess.run(
        [*WATCH, "--hosts", str(fleet), "rules", "--prometheus"], capture_output=True, text=True
    )
    assert made.returncode == 0, made.stderr
    rules.write_text(made.stdout)
    metrics, web = free_port(), free_port()
    (tmp_path / "prometheus.yml").write_text(PROM_CONFIG.format(rules=rules, port=metrics))
    log = open(tmp_path / "watch.log", "w")  # noqa: SIM115
    watch = subprocess.Popen(
        [
            *WATCH,
            "--hosts",
            str(fleet),
            "watch",
            "--interval",
            "1",
            "--prometheus",
            f"127.0.0.1:{metrics}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    prom = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{web}",
            "--log.level=warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "prom.log", "w"),
    )
    try:
        wait_for(
            lambda: prom.poll() is not None or answers(f"http://127.0.0.1:{web}/-/ready"),
            why="prometheus",
        )
        assert prom.poll() is None, (tmp_path / "prom.log").read_text()[-2000:]

        def overfitting():
            doc = get_json(f"http://127.0.0.1:{web}/api/v1/alerts")
            return [
                a
                for a in doc["data"]["alerts"]
                if a["labels"]["alertname"] == "overfitting" and a["state"] == "firing"
            ]

        (got,) = wait_for(overfitting, 180, why="overfitting firing in Prometheus")
        assert got["labels"]["host"] == "local" and got["labels"]["severity"] == "warning"
        assert got["labels"]["subject"] == got["labels"]["path"] and got["labels"]["path"].endswith(
            "run-1"
        )
        assert got["annotations"]["summary"] == "run run-1 on local is overfitting"
        # a rule with nothing to say stays quiet: host-down is not firing for a host that answers
        doc = get_json(f"http://127.0.0.1:{web}/api/v1/alerts")
        assert not [a for a in doc["data"]["alerts"] if a["labels"]["alertname"] == "host-down"]
    finally:
        for p in (prom, watch):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(60)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        log.close()


@pytest.mark.parametrize("rule", sorted(set(RULES) - set(EXPRESSED)))
def test_a_rule_left_out_says_why(rule):
    assert f"# {rule}: not expressed" in rules_file()
