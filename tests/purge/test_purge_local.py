"""Purge on the local host: real processes holding files open, mapped or as cwd; a tmpfs and a
bind mount; keepers that are hard links, symlinks or missing; roots; changes between check and
execute; the pure judgement over gathered facts; the fd-based delete for old Pythons."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

from fleetdeck.backend.actions.purge.judge import plan_purge
from fleetdeck.backend.fleet.config import load_fleet
from fleetdeck.backend.host.lib.text import shown
from fleetdeck.backend.host.purge.facts import gather
from fleetdeck.backend.host.purge.paths import open_chain
from fleetdeck.backend.host.purge.remove import remove_pinned
from fleetdeck.backend.host.purge.verdict import evaluate

from support.purge import ckpt, local_host, make_run, plan_for, purge
from support.weights import safetensors


@pytest.fixture
def local(tmp_path):
    """(host config of this machine, its runs root): purge roots default to runs."""
    return local_host(tmp_path)


@contextmanager
def child(code: str, *args: str, cwd: Path | None = None):
    """A real Python process running `code`; it prints 'ready' and lives until its stdin closes."""
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=cwd
    )
    try:
        assert proc.stdout.readline().strip() == b"ready"
        yield proc
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)


HOLD_OPEN = "import sys; f = open(sys.argv[1], 'rb'); print('ready', flush=True); sys.stdin.read()"
MAP_THEN_CLOSE = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
fd = os.open(sys.argv[1], os.O_RDONLY)
addr = libc.mmap(None, 4096, 1, 1, fd, 0)  # PROT_READ, MAP_SHARED
assert addr not in (None, ctypes.c_void_p(-1).value)
os.close(fd)
print('ready', flush=True)
sys.stdin.read()
"""
IDLE = "import sys; print('ready', flush=True); sys.stdin.read()"


async def test_file_held_open_by_a_process(local):
    host_cfg, runs = local
    p = ckpt(make_run(runs, "run open"))
    with child(HOLD_OPEN, str(p / "optimizer.pt")) as proc:
        plan = await plan_for(host_cfg, [p])
        assert plan.paths[0].refused == ["in-use"]
        msg = plan.paths[0].refusals[0].message
        assert f"pid {proc.pid}" in msg and "has open" in msg
        report = await purge(host_cfg, plan)
        assert not report.deleted and p.is_dir()
    assert (await plan_for(host_cfg, [p])).ok


async def test_file_mapped_with_its_fd_closed(local):
    host_cfg, runs = local
    p = ckpt(make_run(runs, "run map"))
    target = p / "optimizer.pt"
    with child(MAP_THEN_CLOSE, str(target)) as proc:
        fds = Path(f"/proc/{proc.pid}/fd")
        assert str(target) not in [os.readlink(fds / n) for n in os.listdir(fds)]
        assert str(target) in Path(f"/proc/{proc.pid}/maps").read_text()
        plan = await plan_for(host_cfg, [p])
        assert plan.paths[0].refused == ["in-use"]
        assert f"pid {proc.pid}" in plan.paths[0].refusals[0].message
        assert " maps " in plan.paths[0].refusals[0].message
    assert (await plan_for(host_cfg, [p])).ok


async def test_process_cwd_inside(local):
    host_cfg, runs = local
    p = ckpt(make_run(runs, "run cwd"))
    (p / "deep").mkdir()
    with child(IDLE, cwd=p / "deep") as proc:
        plan = await plan_for(host_cfg, [p])
        assert plan.paths[0].refused == ["in-use"]
        assert f"pid {proc.pid}" in plan.paths[0].refusals[0].message
        assert "cwd" in plan.paths[0].refusals[0].message


async def test_process_that_starts_using_it_after_the_check(local):
    host_cfg, runs = local
    p = ckpt(make_run(runs, "run late"))
    plan = await plan_for(host_cfg, [p])
    assert plan.ok
    with child(HOLD_OPEN, str(p / "optimizer.pt")):
        report = await purge(host_cfg, plan)
    assert not report.deleted and report.paths[0].refusals[0].code == "in-use" and p.is_dir()


async def test_keeper_changed_after_the_check(local):
    host_cfg, runs = local
    run = make_run(runs, "run keeper")
    plan = await plan_for(host_cfg, [ckpt(run)])
    assert plan.ok
    (run / "adapter" / "adapter_model.safetensors").write_bytes(safetensors(b"retrained"))
    report = await purge(host_cfg, plan)
    assert not report.deleted and "changed-since-check" in report.to_json()["paths"][0]["refused"]
    assert ckpt(run).is_dir()


def _mount(*argv: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting needs root")
    r = subprocess.run(["mount", *argv], capture_output=True)
    if r.returncode:
        pytest.skip(f"cannot mount here: {r.stderr.decode().strip()}")


@pytest.mark.root
async def test_tmpfs_mounted_inside(local):
    host_cfg, runs = local
    p = ckpt(make_run(runs, "run mount 'q'"))
    mnt = p / "mnt point"
    mnt.mkdir()
    _mount("-t", "tmpfs", "-o", "size=1m", "fleetdeck-test", str(mnt))
    try:
        (mnt / "inside").write_bytes(b"x")
        plan = await plan_for(host_cfg, [p])
        assert plan.paths[0].refused == ["mounted"]
        assert shown(str(mnt)) in plan.paths[0].refusals[0].message
        report = await purge(host_cfg, plan)
        assert not report.deleted and (mnt / "inside").exists()
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


@pytest.mark.root
async def test_adapter_bind_mounted_from_the_checkpoint(local):
    host_cfg, runs = local
    run = make_run(runs, "run bind", adapter=False)
    (run / "adapter").mkdir()
    (ckpt(run, 50) / "adapter_config.json").write_text("{}")  # a valid adapter, but the same folder
    _mount("--bind", str(ckpt(run, 50)), str(run / "adapter"))
    try:
        plan = await plan_for(host_cfg, [ckpt(run, 50)])
        assert "no-keeper" in plan.paths[0].refused
        assert "mounted" not in plan.paths[0].refused
    finally:
        subprocess.run(["umount", str(run / "adapter")], check=True)


async def test_adapter_hard_linked_into_the_checkpoint(local):
    host_cfg, runs = local
    run = make_run(runs, "run hardlink", adapter=False)
    (run / "adapter").mkdir()
    os.link(
        ckpt(run, 50) / "adapter_model.safetensors", run / "adapter" / "adapter_model.safetensors"
    )
    (run / "adapter" / "adapter_config.json").write_text("{}")
    plan = await plan_for(host_cfg, [ckpt(run, 50)])
    assert plan.paths[0].refused == ["no-keeper"]
    assert "hard link" in plan.paths[0].refusals[0].message
    # the other checkpoint shares nothing with the adapter: allowed, with a warning
    plan = await plan_for(host_cfg, [ckpt(run, 25)])
    assert plan.ok and any("hard links" in w for w in plan.warnings)


@pytest.mark.parametrize("adapter", ["missing", "symlink", "empty", "file"])
async def test_run_without_an_independent_final_adapter(local, tmp_path, adapter):
    host_cfg, runs = local
    run = make_run(runs, f"run {adapter}", adapter=False)
    if adapter == "symlink":
        real = tmp_path / "real-adapter"
        real.mkdir()
        (real / "adapter_model.safetensors").write_bytes(safetensors(b"w"))
        (run / "adapter").symlink_to(real)
    elif adapter == "empty":
        (run / "adapter").mkdir()
    elif adapter == "file":
        (run / "adapter").write_bytes(b"not a folder")
    plan = await plan_for(host_cfg, [ckpt(run)])
    assert plan.paths[0].refused == ["no-keeper"]
    report = await purge(host_cfg, plan)
    assert not report.deleted and ckpt(run).is_dir()


async def test_hf_layout_checkpoint_directly_in_the_run(local):
    host_cfg, runs = local
    run = runs / "hf run"
    (run / "checkpoint-10").mkdir(parents=True)
    (run / "checkpoint-10" / "adapter_model.safetensors").write_bytes(safetensors(b"w"))
    plan = await plan_for(host_cfg, [run / "checkpoint-10"])
    assert plan.paths[0].refused == ["no-keeper"] and plan.paths[0].runs == (str(run),)


async def test_roots_adapters_and_literal_paths(local, tmp_path):
    host_cfg, runs = local
    run = make_run(runs, "run roots")
    elsewhere = tmp_path / "elsewhere" / "checkpoint-1"
    elsewhere.mkdir(parents=True)
    cases = {
        str(elsewhere): ["outside-roots"],
        str(runs): ["is-root", "holds-final-adapter", "no-keeper"],
        str(runs) + "/": ["is-root", "holds-final-adapter", "no-keeper"],
        str(run / "adapter"): ["holds-final-adapter", "no-witness"],
        str(run): ["holds-final-adapter", "no-keeper"],
        "relative/checkpoint-25": ["not-absolute"],
        f"{run}/../{run.name}/checkpoints/checkpoint-25": ["not-normalized"],
        str(ckpt(run) / "optimizer.pt"): ["not-directory"],
        str(run / "nope" / "checkpoint-1"): ["not-found"],
    }
    for path, codes in cases.items():
        plan = await plan_for(host_cfg, [path])
        assert plan.paths[0].refused == codes, path
        assert all(r.message and "\n" not in r.message for r in plan.paths[0].refusals)
    assert all(Path(p).exists() for p in (elsewhere, runs, run / "adapter", run))


async def test_a_path_outside_the_roots_is_refused_without_being_walked(local, tmp_path):
    host_cfg, runs = local
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "checkpoint-1").mkdir(parents=True)
    (elsewhere / "link").symlink_to("/etc")
    plan = await plan_for(host_cfg, [elsewhere])
    p = plan.paths[0]
    assert p.refused == ["outside-roots"]
    # never walked: no symlink warning, no run found losing a checkpoint, the content checks skipped
    assert not any("symlink" in w for w in plan.warnings)
    assert p.runs == ()
    checks = dict(p.checks)
    assert checks["outside-roots"] == "fail" and checks["holds-final-adapter"] == "skipped"
    # `/` itself answers at once, refused the same way
    plan = await plan_for(host_cfg, ["/"])
    assert plan.paths[0].refused == ["outside-roots"]
    assert elsewhere.is_dir() and (elsewhere / "link").is_symlink()


async def test_purge_root_given_through_a_symlink_is_resolved(tmp_path):
    real = tmp_path / "real-runs"
    real.mkdir()
    (tmp_path / "runs-link").symlink_to(real)
    fleet = tmp_path / "hosts.toml"
    fleet.write_text(
        f'[hosts.local]\nlocal = true\nruns = ["{tmp_path / "runs-link"}"]\n'
        f'python = "{sys.executable}"\n'
    )
    host_cfg = load_fleet(str(fleet)).host("local")
    run = make_run(real, "run")
    assert (await plan_for(host_cfg, [ckpt(run)])).ok
    plan = await plan_for(
        host_cfg, [tmp_path / "runs-link" / "run" / "checkpoints" / "checkpoint-25"]
    )
    assert plan.paths[0].refused[0] == "symlink"


def _fake_docker(bin_dir: Path, body: str) -> None:
    """A stand-in `docker` CLI (no engine runs in the test environment)."""
    bin_dir.mkdir(exist_ok=True)
    exe = bin_dir / "docker"
    exe.write_text(f"#!{sys.executable}\nimport json, sys\n{body}\n")
    exe.chmod(0o755)


async def test_container_mounting_a_folder_above(local, tmp_path, monkeypatch):
    host_cfg, runs = local
    run = make_run(runs, "run docker")
    _fake_docker(
        tmp_path / "bin",
        f"""
if sys.argv[1] == "ps":
    print("c0ffee" * 4)
elif sys.argv[1] == "inspect":
    print(json.dumps([{{"Id": "c0ffee" * 4, "Name": "/vllm", "State": {{"Running": True}},
                       "Mounts": [{{"Source": {str(run)!r}, "Destination": "/models"}}]}}]))
""",
    )
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    plan = await plan_for(host_cfg, [ckpt(run)])
    assert plan.paths[0].refused == ["container-mount"]
    assert (
        "vllm" in plan.paths[0].refusals[0].message
        and "running" in plan.paths[0].refusals[0].message
    )


async def test_docker_engine_that_cannot_be_asked(local, tmp_path, monkeypatch):
    host_cfg, runs = local
    run = make_run(runs, "run docker denied")
    _fake_docker(
        tmp_path / "bin",
        'sys.stderr.write("permission denied while trying to connect to the Docker '
        'daemon socket at unix:///var/run/docker.sock\\n"); sys.exit(1)',
    )
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    plan = await plan_for(host_cfg, [ckpt(run)])
    assert plan.paths[0].refused == ["container-unknown"]
    _fake_docker(
        tmp_path / "bin",
        'sys.stderr.write("Cannot connect to the Docker daemon at '
        'unix:///var/run/docker.sock. Is the docker daemon running?\\n"); sys.exit(1)',
    )
    plan = await plan_for(host_cfg, [ckpt(run)])
    assert plan.ok and any("engine is not running" in w for w in plan.warnings)


def _facts(runs: Path, paths: list[Path]) -> dict:
    """Facts gathered in this process (the helper's own code, run here)."""
    return gather([str(p) for p in paths], [str(runs)], hashing=True)


def test_plan_is_pure_over_facts(local):
    _, runs = local
    run = make_run(runs, "run pure")
    facts = _facts(runs, [ckpt(run), ckpt(run, 50)])
    assert plan_purge("h", facts) == plan_purge("h", copy.deepcopy(facts))
    assert plan_purge("h", facts).ok

    f = copy.deepcopy(facts)
    f["proc_unreadable"] = [
        {"pid": 4242, "comm": "x", "ancestor": False, "error": "/proc/4242/fd: Permission denied"}
    ]
    plan = plan_purge("h", f)
    assert [p.refused for p in plan.paths] == [["in-use"], ["in-use"]]
    assert "cannot tell" in plan.paths[0].refusals[0].message
    f["proc_unreadable"][0]["ancestor"] = True
    plan = plan_purge("h", f)
    assert plan.ok and any("4242" in w for w in plan.warnings)

    f = copy.deepcopy(facts)
    f["docker"] = {"present": True, "state": "error", "error": "timed out", "mounts": []}
    assert [p.refused for p in plan_purge("h", f).paths] == [["container-unknown"]] * 2

    f = copy.deepcopy(facts)
    f["paths"][0]["zfs"] = {"dataset": "tank/runs", "usedbysnapshots": 123, "snapshots": 2}
    plan = plan_purge("h", f)
    assert plan.ok and any("snapshot" in w and "tank/runs" in w for w in plan.warnings)

    f = copy.deepcopy(facts)
    f["paths"][1]["mounts_inside"] = [str(ckpt(run, 50)) + "/m\nnt"]
    plan = plan_purge("h", f)
    assert [p.refused for p in plan.paths] == [[], ["mounted"]]
    assert "m\\nnt" in plan.paths[1].refusals[0].message


async def test_paths_listed_twice_or_nested(local):
    host_cfg, runs = local
    run = make_run(runs, "run twice")
    (ckpt(run) / "sub").mkdir()
    plan = await plan_for(host_cfg, [ckpt(run), str(ckpt(run)) + "/", ckpt(run) / "sub"])
    assert [p.refused for p in plan.paths] == [[], ["overlapping"], ["overlapping"]]
    report = await purge(host_cfg, plan)
    assert not report.deleted and (ckpt(run) / "sub").is_dir()


def test_every_refusal_code_has_a_sentence(local):
    _, runs = local
    run = make_run(runs, "run codes", adapter=False)
    f = _facts(runs, [ckpt(run)])
    f["paths"][0].update(
        mounts_inside=["/m"],
        containers=[{"id": "1", "name": "c", "running": False, "source": "/", "destination": "/d"}],
        scan_error="x: denied",
        adapters=[str(run / "adapter")],
    )
    f["holders"] = [{"index": 0, "pid": 1, "how": "fd", "file": "/f", "comm": "c"}]
    f["docker"] = {"state": "denied", "error": "permission denied", "mounts": []}
    v = evaluate(f)["paths"][0]
    codes = {c for c, _ in v["refusals"]}
    assert codes == {
        "unreadable",
        "holds-final-adapter",
        "in-use",
        "container-mount",
        "container-unknown",
        "mounted",
        "no-keeper",
    }
    assert all(len(m) > 20 for _, m in v["refusals"])


def test_shown_escapes_what_could_disguise_a_path():
    assert shown("a\nb") == "a\\nb"
    assert shown("x\x1b[31my") == "x\\x1b[31my"
    assert shown("back\\slash") == "back\\\\slash"
    assert shown("\u202eevil") == "\\u202eevil"
    assert shown("caf\udce9") == "caf\\xe9"
    assert shown("/plain path/é") == "/plain path/é"


def test_pinned_remove_deletes_links_without_following(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_bytes(b"keep")
    victim = tmp_path / "victim"
    (victim / "sub" / "deeper").mkdir(parents=True)
    (victim / "sub" / "deeper" / "f").write_bytes(b"x")
    (victim / "dirlink").symlink_to(outside)
    (victim / "sub" / "filelink").symlink_to(outside / "keep")
    comps = [c for c in str(victim).split("/") if c]
    parent, fd, pins = open_chain(comps)
    os.close(parent)
    os.close(fd)
    remove_pinned(comps, pins)
    assert not victim.exists() and (outside / "keep").read_bytes() == b"keep"
    assert os.listdir(tmp_path) == ["outside"]


def _old_python() -> str | None:
    """A Python 3.8 on this machine, if any (the oldest a host may have)."""
    import glob
    import shutil

    # pyenv's own binary before any shim on PATH: a shim may refuse to pick a version
    pyenv = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.8*/bin/python3.8")))
    return pyenv[0] if pyenv else shutil.which("python3.8")


async def test_helper_on_python_3_8_deletes_links_without_following(tmp_path):
    py = _old_python()
    if py is None:
        pytest.skip("no Python 3.8 on this machine")
    runs = tmp_path / "runs"
    run = make_run(runs, "run old-python")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_bytes(b"keep me")
    (ckpt(run) / "link-out").symlink_to(outside)
    (ckpt(run) / "file-link").symlink_to(outside / "precious")
    fleet = tmp_path / "hosts.toml"
    fleet.write_text(f'[hosts.local]\nlocal = true\nruns = ["{runs}"]\npython = "{py}"\n')
    host_cfg = load_fleet(str(fleet)).host("local")
    plan = await plan_for(host_cfg, [ckpt(run)])
    assert plan.ok and any("symlink" in w for w in plan.warnings)
    report = await purge(host_cfg, plan)
    assert report.ok and not ckpt(run).exists()
    assert (outside / "precious").read_bytes() == b"keep me"


@pytest.mark.root
def test_unprivileged_user_who_cannot_read_every_process_is_refused():
    """As `nobody`, root's processes cannot be read: in use is unknown, which refuses."""
    import json
    import shutil
    import tempfile

    from fleetdeck.backend.actions.purge.main import HELPER
    from fleetdeck.backend.fleet.link.boot import BOOT, helper_stdin

    if os.geteuid() != 0 or not shutil.which("setpriv") or not os.path.exists("/usr/bin/python3"):
        pytest.skip("needs root, setpriv and /usr/bin/python3")
    base = Path(tempfile.mkdtemp(prefix="fleetdeck-purge-"))
    try:
        base.chmod(0o755)
        run = make_run(base / "runs", "run nobody")
        for p in [base, *base.rglob("*")]:
            os.chown(p, 65534, 65534)
        with child(IDLE):  # a root process that nobody may not inspect
            payload = {"op": "check", "paths": [str(ckpt(run))], "roots": [str(base / "runs")]}
            out = subprocess.run(
                [
                    "setpriv",
                    "--reuid=65534",
                    "--regid=65534",
                    "--clear-groups",
                    "/usr/bin/python3",
                    "-c",
                    BOOT,
                ],
                input=helper_stdin(HELPER) + json.dumps(payload).encode(),
                capture_output=True,
                check=True,
            ).stdout
        plan = plan_purge("local", json.loads(out))
        assert plan.paths[0].refused == ["in-use"]
        assert "cannot tell" in plan.paths[0].refusals[0].message
    finally:
        shutil.rmtree(base)
