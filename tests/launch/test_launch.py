"""`fleetdeck launch`: pre-flight refusals, estimates, `--json`, over a real loopback sshd host.

Nothing here starts the trainer (see test_launch_chain.py for the runs that train).
"""

from __future__ import annotations

import json
import struct
import subprocess
from pathlib import Path

import pytest

from fleetdeck.backend.actions.audit import read_audit
from fleetdeck.backend.actions.launch.main import preflight
from fleetdeck.backend.actions.launch.values import run_values
from fleetdeck.backend.fleet.config import ConfigError, load_fleet
from fleetdeck.backend.fleet.link.ssh import HostLink
from fleetdeck.backend.host.launch import estimate as est
from fleetdeck.backend.host.launch import liveruns, resources, shapes
from fleetdeck.backend.host.lib import procfs

from support.launch import HOSTILE, base_values, fake_gpus, launch_cli, write_run_toml
from support.weights import safetensors, write_sparse, write_torn

pytestmark = pytest.mark.sshd


def test_missing_corpus_refused(h1, tmp_path, capsys):
    fleet, runs, _ = h1
    missing = tmp_path / f"{HOSTILE} corpus.jsonl"
    toml = write_run_toml(tmp_path / "RUN.toml", **base_values(runs, missing, f"{HOSTILE} a"))
    rc, out, err = launch_cli(capsys, fleet, "h1", toml)
    assert rc == 1
    assert err.strip() == f"fleetdeck: launch on h1 refused: corpus {missing} does not exist on h1"
    assert not (runs / f"{HOSTILE} a").exists()
    assert not (tmp_path / "pwned").exists()
    rec = read_audit()[-1]
    assert (rec["action"], rec["host"], rec["result"], rec["reason"]) == (
        "launch",
        "h1",
        "refused",
        "corpus",
    )


def test_missing_base_model_refused(h1, tmp_path, capsys):
    fleet, runs, corpus = h1
    base = tmp_path / "no such checkpoint"
    toml = write_run_toml(
        tmp_path / "RUN.toml", **base_values(runs, corpus, "b", base_model=str(base))
    )
    rc, out, err = launch_cli(capsys, fleet, "h1", toml)
    assert rc == 1
    assert f"base model {base} does not exist on h1" in err
    assert len(err.strip().splitlines()) == 1


def test_unknown_architecture_refused(h1, tmp_path, capsys):
    fleet, runs, corpus = h1
    toml = write_run_toml(
        tmp_path / "RUN.toml", **base_values(runs, corpus, "c", base_model="random:gpt9")
    )
    rc, _, err = launch_cli(capsys, fleet, "h1", toml)
    assert rc == 1 and "random:gpt9 is not a built-in architecture" in err


@pytest.mark.parametrize("marker", ["run.json", "adapter", "checkpoints", "checkpoint-25"])
def test_output_holding_a_run_refused(h1, tmp_path, capsys, marker):
    fleet, runs, corpus = h1
    out_dir = runs / f"held-{marker}"
    out_dir.mkdir()
    if marker == "run.json":
        (out_dir / marker).write_text(json.dumps({"state": "finished"}))
    else:
        (out_dir / marker).mkdir()
    before = sorted(p.name for p in out_dir.iterdir())
    toml = write_run_toml(tmp_path / "RUN.toml", **base_values(runs, corpus, out_dir.name))
    rc, out, err = launch_cli(capsys, fleet, "h1", toml, "--json")
    assert rc == 1
    assert f"output {out_dir} already holds a run ({marker})" in err
    doc = json.loads(out)
    assert doc["state"] == "refused" and doc["reason"] == "output" and doc["pid"] is None
    assert {c["name"]: c["ok"] for c in doc["preflight"]}["output"] is False
    assert sorted(p.name for p in out_dir.iterdir()) == before


def test_output_with_foreign_files_refused(h1, tmp_path, capsys):
    fleet, runs, corpus = h1
    out_dir = runs / "foreign"
    out_dir.mkdir()
    (out_dir / "notes.txt").write_text("mine")
    toml = write_run_toml(tmp_path / "RUN.toml", **base_values(runs, corpus, "foreign"))
    rc, _, err = launch_cli(capsys, fleet, "h1", toml)
    assert rc == 1 and "holds files that are not a run (notes.txt)" in err


def test_json_document_on_refusal(h1, tmp_path, capsys):
    fleet, runs, _ = h1
    toml = write_run_toml(tmp_path / "RUN.toml", **base_values(runs, tmp_path / "nope.jsonl", "j"))
    rc, out, err = launch_cli(capsys, fleet, "h1", toml, "--json")
    assert rc == 1
    doc = json.loads(out)  # exactly one document
    assert set(doc) >= {
        "host",
        "run_path",
        "pid",
        "state",
        "preflight",
        "error",
        "reason",
        "estimate",
    }
    assert doc["host"] == "h1" and doc["run_path"] == str(runs / "j") and doc["state"] == "refused"
    names = [c["name"] for c in doc["preflight"]]
    assert names[:3] == ["base-model", "corpus", "output"]
    assert {"memory", "disk", "live-run", "trainer"} <= set(names)
    assert doc["error"] in err


def test_bad_run_toml_is_a_usage_error(h1, tmp_path, capsys):
    fleet, runs, corpus = h1
    toml = write_run_toml(tmp_path / "RUN.toml", **base_values(runs, corpus, "u"), colour="red")
    rc, out, err = launch_cli(capsys, fleet, "h1", toml)
    assert rc == 2 and "unknown key 'colour'" in err and out == ""
    assert read_audit() == []


def test_relative_path_refused_for_a_remote_host(h1, tmp_path, capsys):
    fleet, runs, corpus = h1
    toml = write_run_toml(tmp_path / "RUN.toml", **base_values(runs, "data/corpus.jsonl", "rel"))
    rc, _, err = launch_cli(capsys, fleet, "h1", toml)
    assert rc == 2 and "key 'corpus' is a relative path" in err and "~/" in err


def test_relative_path_resolved_for_the_local_host(tmp_path):
    from fleetdeck.backend.fleet.config import HostConfig

    local = HostConfig(name="local", local=True)
    toml = write_run_toml(
        tmp_path / "RUN.toml",
        name="t",
        base_model="random:tiny",
        corpus="data/c.jsonl",
        output="~/runs/x",
    )
    v = run_values(toml, local)
    assert v["corpus"] == str(tmp_path / "data" / "c.jsonl")
    assert v["output"] == "~/runs/x"  # `~` expands on the host, not here


def test_after_a_failed_run_refused(h1, tmp_path, capsys):
    fleet, runs, corpus = h1
    prev = runs / "prev failed"
    prev.mkdir()
    (prev / "run.json").write_text(
        json.dumps({"state": "failed", "error": "corpus line 3 is not JSON"})
    )
    toml = write_run_toml(tmp_path / "RUN.toml", **base_values(runs, corpus, "next"))
    rc, _, err = launch_cli(capsys, fleet, "h1", toml, "--after", prev)
    assert rc == 1
    assert f"run {prev} failed (corpus line 3 is not JSON); a chain never starts" in err
    assert not (runs / "next").exists()


def _adapter(where: Path, weights: bytes | None = b"\0" * 64, config: bool = True) -> None:
    where.mkdir(parents=True, exist_ok=True)
    if weights is not None:
        (where / "adapter_model.safetensors").write_bytes(safetensors(weights) if weights else b"")
    if config:
        (where / "adapter_config.json").write_text("{}")


def _no_adapter(prev):
    pass


def _crashed_save(prev):  # the config written, the weights never
    _adapter(prev / "adapter", weights=None)


def _zero_byte_weights(prev):
    _adapter(prev / "adapter", weights=b"")


def _weights_without_config(prev):
    _adapter(prev / "adapter", config=False)


def _torn_weights(prev):
    _adapter(prev / "adapter", weights=None)
    write_torn(prev / "adapter" / "adapter_model.safetensors", 100)


def _sparse_weights(prev):
    _adapter(prev / "adapter", weights=None)
    write_sparse(prev / "adapter" / "adapter_model.safetensors")


def _symlinked_adapter(prev):
    _adapter(prev.parent / (prev.name + "-elsewhere"))
    (prev / "adapter").symlink_to(prev.parent / (prev.name + "-elsewhere"))


@pytest.mark.parametrize(
    "layout",
    [
        _no_adapter,
        _crashed_save,
        _zero_byte_weights,
        _torn_weights,
        _sparse_weights,
        _weights_without_config,
        _symlinked_adapter,
    ],
    ids=lambda f: f.__name__.strip("_"),
)
def test_after_a_finished_run_without_a_final_adapter_refused(h1, tmp_path, capsys, layout):
    """The one final-adapter rule decides whether a chain may fire (a weightless save never)."""
    fleet, runs, corpus = h1
    prev = runs / f"prev-{layout.__name__.strip('_')}"
    prev.mkdir()
    (prev / "run.json").write_text(json.dumps({"state": "finished"}))
    layout(prev)
    toml = write_run_toml(tmp_path / "RUN.toml", **base_values(runs, corpus, f"next-{prev.name}"))
    rc, _, err = launch_cli(capsys, fleet, "h1", toml, "--after", prev)
    assert rc == 1 and f"run {prev} finished without a final adapter (" in err
    assert "a chain never starts after a run that did not finish with its adapter" in err


@pytest.mark.parametrize("where", ["adapter", "."])
async def test_after_a_run_with_its_final_adapter_is_ready(h1, tmp_path, where):
    """Both layouts of a final adapter: fleetdeck's `adapter/` and HF's save_model at the root."""
    fleet_path, runs, corpus = h1
    host = load_fleet(str(fleet_path)).host("h1")
    prev = runs / f"prev-ready-{where.strip('.') or 'root'}"
    prev.mkdir()
    (prev / "run.json").write_text(json.dumps({"state": "finished"}))
    _adapter(prev / where)
    async with HostLink(host) as link:
        pre = await preflight(
            link, base_values(runs, corpus, f"after-{prev.name}"), after=str(prev)
        )
    check = next(c for c in pre.checks if c.name == "after")
    assert check.ok and "finished with its final adapter" in check.message


class LiveRun:
    """A run folder whose run.json says running, with a real live process behind it."""

    def __init__(self, path):
        path.mkdir()
        self.proc = subprocess.Popen(["sleep", "300"])
        (path / "run.json").write_text(
            json.dumps(
                {
                    "state": "running",
                    "pid": self.proc.pid,
                    "start_ticks": procfs.start_ticks(self.proc.pid),
                }
            )
        )

    def stop(self):
        self.proc.kill()
        self.proc.wait()


def test_live_run_on_the_gpu_refused_unless_forced(tmp_path):
    live_dir = tmp_path / "live one"
    live = LiveRun(live_dir)
    pid = live.proc.pid
    try:

        def check(gpus, force=False, after=None, cfg=None):
            checks = []
            liveruns.check_live_runs(
                checks, cfg or {"gpus": 1}, gpus, [str(tmp_path)], after, force
            )
            return checks[0]

        on0 = check(fake_gpus((pid, "GPU-0")))
        assert on0["ok"] is False
        # other trainers on this shared machine may be named too
        assert f"{live_dir} (pid {pid})" in on0["message"]
        assert "live on GPU 0; wait for it, or pass --force to share" in on0["message"]
        forced = check(fake_gpus((pid, "GPU-0")), force=True)
        assert forced["ok"] and "--force given, starting anyway" in forced["message"]
        assert str(pid) not in check(fake_gpus((pid, "GPU-1")))["message"]  # another GPU: no clash
        assert f"pid {pid}" in check(fake_gpus((pid, "GPU-1")), cfg={"gpus": 2})["message"]
        assert f"pid {pid}" in check(fake_gpus())["message"]  # on no GPU yet: it may be loading
        # the run a chain waits for is no clash: it will have ended when this one starts
        assert str(pid) not in check(fake_gpus((pid, "GPU-0")), after=str(live_dir))["message"]
    finally:
        live.stop()
    assert str(pid) not in check(fake_gpus((pid, "GPU-0")))["message"]  # a dead pid is no live run


async def test_live_run_on_a_cpu_host_is_a_note(h1, tmp_path):
    fleet_path, runs, corpus = h1
    host = load_fleet(str(fleet_path)).host("h1")
    live = LiveRun(runs / "live cpu")
    try:
        link = HostLink(host)
        try:
            pre = await preflight(link, base_values(runs, corpus, "second"))
        finally:
            await link.close()
    finally:
        live.stop()
    check = next(c for c in pre.checks if c.name == "live-run")
    assert check.ok and f"{runs / 'live cpu'} (pid {live.proc.pid})" in check.message
    assert "no GPU on this host" in check.message


def test_run_values_rejects_what_the_trainer_rejects(tmp_path):
    from fleetdeck.backend.fleet.config import HostConfig

    h = HostConfig(name="x", address="x")
    with pytest.raises(ConfigError, match="'seq_len' must be greater than 0"):
        run_values(
            {
                "name": "t",
                "base_model": "random:tiny",
                "corpus": "/c",
                "output": "/o",
                "seq_len": 0,
            },
            h,
        )
    with pytest.raises(ConfigError, match="missing key 'output'"):
        run_values({"name": "t", "base_model": "random:tiny", "corpus": "/c"}, h)


# -- estimates -------------------------------------------------------------------------------
def test_tiny_lora_count_matches_the_trainer():
    # the trainer logs "trainable parameters 65,536" for random:tiny at rank 32 on all seven targets
    params, lora, _ = shapes.arch_shapes("tiny", set(est_targets()), 32)
    assert lora == 65536
    assert shapes.arch_shapes("qwen3-0.6b", set(est_targets()), 32)[0] == pytest.approx(
        596e6, rel=0.02
    )


def est_targets():
    return ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def test_checkpoint_shapes_from_safetensors_headers(tmp_path):
    header = {
        "model.layers.0.self_attn.q_proj.weight": {
            "dtype": "BF16",
            "shape": [256, 128],
            "data_offsets": [0, 0],
        },
        "model.layers.0.mlp.down_proj.weight": {
            "dtype": "BF16",
            "shape": [128, 512],
            "data_offsets": [0, 0],
        },
        "model.layers.0.mlp.down_proj.bias": {
            "dtype": "BF16",
            "shape": [128],
            "data_offsets": [0, 0],
        },
        "model.embed_tokens.weight": {
            "dtype": "BF16",
            "shape": [1000, 128],
            "data_offsets": [0, 0],
        },
        "__metadata__": {"format": "pt"},
    }
    raw = json.dumps(header).encode()
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw)
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "vocab_size": 1000,
                "hidden_size": 128,
                "intermediate_size": 512,
                "num_hidden_layers": 1,
            }
        )
    )
    params, lora, dims = shapes.checkpoint_shapes(str(tmp_path), {"q_proj", "down_proj"}, 8)
    assert params == 256 * 128 + 128 * 512 + 128 + 1000 * 128
    assert lora == 8 * (256 + 128) + 8 * (128 + 512)
    assert dims == {"vocab": 1000, "hidden": 128, "inter": 512, "layers": 1}


def test_memory_estimate_follows_the_stated_formula():
    cfg = dict(
        base_model="random:qwen3-0.6b",
        seq_len=4096,
        micro_batch="auto",
        gradient_checkpointing="auto",
        max_steps=100,
        save_steps=25,
        target_modules=est_targets(),
        lora_rank=32,
    )
    gpu = {
        "gpus": [{"index": 0, "uuid": "u", "name": "x", "unified": False, "free": 1 << 40}],
        "apps": [],
        "error": None,
    }
    e = est.estimate(cfg, gpu, 10**6)
    p, lora, a = shapes.arch_shapes("qwen3-0.6b", set(est_targets()), 32)
    layer = 4096 * (12 * a["hidden"] + 4 * a["inter"]) * 2
    want = (
        p * 2
        + lora * 16
        + a["layers"] * 4096 * a["hidden"] * 2
        + layer
        + 4096 * a["vocab"] * 16
        + est.GIB
    )
    assert e["memory_bytes"] == want and e["bytes_per_param"] == 2 and e["device"] == "cuda"
    assert (
        e["saves"] == 4
        and e["disk_bytes"] == 4 * (lora * 12 + est.MIB) + lora * 4 + est.MIB + 100 * 300
    )
    off = est.estimate(dict(cfg, gradient_checkpointing=False), gpu, 10**6)
    assert off["memory_parts"]["activations"] == a["layers"] * layer


def test_memory_check_refuses_a_small_gpu():
    checks = []
    gpu = {
        "gpus": [{"index": 0, "uuid": "u", "name": "x", "unified": False, "free": 2 * est.GIB}],
        "apps": [],
        "error": None,
    }
    cfg = dict(base_model="random:qwen3-4b", seq_len=4096, gpus=1)
    e = est.estimate(cfg, gpu, 10**6)
    resources.check_memory(checks, cfg, gpu, e, None)
    assert checks[0]["ok"] is False
    assert checks[0]["message"].startswith("GPU 0 has 2.0 GiB free; the run needs about ")
    checks = []
    resources.check_memory(checks, dict(cfg, gpus=2), gpu, e, None)
    assert checks == [
        {"name": "memory", "ok": False, "message": "the run asks for 2 GPUs and this host has 1"}
    ]


def test_host_helper_is_stdlib_python_3_8():
    import ast
    import sys

    from fleetdeck.backend.actions.launch.main import helper_source

    sources = [helper_source()]
    for name in (
        "estimate.py",
        "liveruns.py",
        "main.py",
        "preflight.py",
        "resources.py",
        "targets.py",
    ):
        sources.append((Path(est.__file__).parent / name).read_text())
    for src in sources:
        tree = ast.parse(src, feature_version=(3, 8))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.module.startswith("fleetdeck")
            ):
                continue  # the controller-side fallback; never taken on a host (est is defined)
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else ([node.module] if isinstance(node, ast.ImportFrom) else [])
            )
            for n in names:
                assert n.split(".")[0] in sys.stdlib_module_names, n


def test_after_a_run_recorded_with_a_bare_pid_is_refused(h1, tmp_path, capsys):
    """A pid alone is no identity (it is reused): a prerequisite whose run.json lacks the start
    time cannot be waited for, even while that pid (here: this test) is alive."""
    import os

    fleet, runs, corpus = h1
    prev = runs / "prev-bare-pid"
    prev.mkdir()
    (prev / "run.json").write_text(json.dumps({"state": "running", "pid": os.getpid()}))
    toml = write_run_toml(tmp_path / "RUN.toml", **base_values(runs, corpus, "after-bare-pid"))
    rc, _, err = launch_cli(capsys, fleet, "h1", toml, "--after", prev)
    assert rc == 1
    assert f"run {prev} records pid {os.getpid()} without its start time" in err
    assert not (runs / "after-bare-pid").exists()


def test_gpus_check_holds_the_run_to_the_hosts_gpus(monkeypatch):
    """`gpus = N` past the GPUs the host has is refused at pre-flight with its own check,
    before the trainer would find out (and fail the run) on the host."""

    def check(cfg, gpus):
        checks = []
        resources.check_gpus(checks, cfg, gpus)
        (c,) = checks
        assert c["name"] == "gpus"
        return c["ok"], c["message"]

    monkeypatch.delenv("FLEETDECK_TRAIN_CPU_PROCESSES", raising=False)
    two = fake_gpus()
    assert check({"gpus": 1000}, two) == (
        False,
        "RUN.toml asks for gpus = 1000 and this host has 2 GPUs; set gpus to 2 or fewer",
    )
    assert check({"gpus": 3}, two)[0] is False
    assert check({"gpus": 2}, two) == (True, "the run takes 2 of this host's 2 GPUs (GPU 0, 1)")
    assert check({}, two) == (True, "the run takes 1 of this host's 2 GPUs (GPU 0)")
    one = {"gpus": two["gpus"][:1], "apps": [], "error": None}
    assert check({"gpus": 2}, one) == (
        False,
        "RUN.toml asks for gpus = 2 and this host has 1 GPU; set gpus to 1 or fewer",
    )
    cpu = {"gpus": [], "apps": [], "error": None}
    assert check({"gpus": 1}, cpu) == (
        True,
        "no GPU on this host: the run trains in one process on the CPU",
    )
    assert check({"gpus": 1000}, cpu) == (
        False,
        "RUN.toml asks for gpus = 1000 and this host has no GPU; set gpus = 1 to train on its CPU",
    )
    broken = {"gpus": [], "apps": [], "error": "nvidia-smi failed: NVML mismatch"}
    assert check({"gpus": 4}, broken) == (
        False,
        "RUN.toml asks for gpus = 4 and this host has no GPU (nvidia-smi "
        "failed: NVML mismatch); set gpus = 1 to train on its CPU",
    )
    monkeypatch.setenv("FLEETDECK_TRAIN_CPU_PROCESSES", "1")  # what the trainer's own tests ask for
    assert check({"gpus": 2}, cpu)[0] is True


def test_gpus_past_the_hosts_count_refused_at_preflight(h1, tmp_path, capsys):
    fleet, runs, corpus = h1
    toml = write_run_toml(tmp_path / "RUN.toml", **base_values(runs, corpus, "many", gpus=1000))
    rc, out, err = launch_cli(capsys, fleet, "h1", toml, "--json")
    assert rc == 1, err
    doc = json.loads(out)
    assert doc["state"] == "refused" and doc["reason"] == "gpus" and doc["pid"] is None
    (gpus,) = [c for c in doc["preflight"] if c["name"] == "gpus"]
    assert gpus["ok"] is False and gpus["message"].startswith(
        "RUN.toml asks for gpus = 1000 and this host has "
    )
    assert doc["error"] == gpus["message"] and gpus["message"] in err
    assert not (runs / "many").exists()
    rec = read_audit()[-1]
    assert (rec["action"], rec["result"], rec["reason"]) == ("launch", "refused", "gpus")
