"""A purge's "verified" rests on witnesses, over a real loopback sshd host: the keep rule keeps
complete checkpoints only (a save killed half-way, an empty folder with a huge step, a name
with a newline are never keepers), a purge with nothing to hash is refused, and a run's
best-eval checkpoint is not deleted without its own typed confirmation."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fleetdeck.backend.actions.purge.plan import KeeperResult, PurgeReport
from fleetdeck.backend.host.lib import layout

from support.purge import cli, make_run, sha, uniq
from support.weights import safetensors

pytestmark = pytest.mark.sshd

HOST = "h1"


@pytest.fixture
def h1(sshd_fleet, tmp_path):
    return sshd_fleet.write_fleet(tmp_path / "hosts.toml", names=[HOST]), sshd_fleet.hosts[HOST]


def ck(run: Path, step: int) -> Path:
    return run / "checkpoints" / f"checkpoint-{step}"


def names(run: Path) -> list[str]:
    return sorted(p.name for p in (run / "checkpoints").iterdir())


def with_evals(run: Path, losses: dict[int, float]) -> None:
    """Each checkpoint's own trainer_state.json, as both trainers write it, with its eval."""
    history = []
    for step in sorted(losses):
        history.append({"step": step, "eval_loss": losses[step]})
        (ck(run, step) / "trainer_state.json").write_text(
            json.dumps({"global_step": step, "log_history": history})
        )


def keep(capsys, fleet, run, n, *extra):
    rc, out, err = cli(
        capsys,
        "purge",
        "--hosts",
        str(fleet),
        HOST,
        str(run),
        "--keep-newest",
        str(n),
        "--confirm",
        str(run),
        "--json",
        *extra,
    )
    return rc, json.loads(out), err


def test_a_crashed_save_is_never_the_keeper(h1, capsys):
    """checkpoint-400 holds only trainer_state.json (killed mid-save): --keep-newest 1 keeps 300,
    the newest complete one, deletes 100 and 200, leaves 400 named as incomplete, and says how
    many kept files verified it."""
    fleet, host = h1
    run = make_run(host.runs, uniq(), steps=(100, 200, 300), adapter=False)
    ck(run, 400).mkdir()
    (ck(run, 400) / "trainer_state.json").write_text('{"global_step": 400}')
    before = {p.name: sha(p) for p in ck(run, 300).iterdir()}

    rc, doc, err = keep(capsys, fleet, run, 1, "--dry-run")
    assert rc == 0, err
    assert [p["path"] for p in doc["paths"]] == [str(ck(run, 100)), str(ck(run, 200))]
    assert doc["keep_newest"]["kept"] == [str(ck(run, 300))]
    assert doc["keep_newest"]["incomplete"] == [
        {"step": 400, "path": str(ck(run, 400)), "why": "incomplete: trainer_state.json only"}
    ]
    assert any(
        "checkpoint-400 is incomplete: trainer_state.json only" in w for w in doc["warnings"]
    )
    assert doc["witnesses"] == 3

    rc, doc, err = keep(capsys, fleet, run, 1)
    assert rc == 0, err
    assert doc["deleted"] and doc["verified"] and doc["witnesses"] == 3
    assert doc["verified_by"] == "3 of 3 kept file(s) re-verified by sha256"
    assert names(run) == ["checkpoint-300", "checkpoint-400"]
    assert {p.name: sha(p) for p in ck(run, 300).iterdir()} == before

    # the human report names the witnesses and the incomplete checkpoint
    run2 = make_run(host.runs, uniq(), steps=(100, 200), adapter=False)
    ck(run2, 300).mkdir()
    rc, out, err = cli(
        capsys,
        "purge",
        "--hosts",
        str(fleet),
        HOST,
        str(run2),
        "--keep-newest",
        "1",
        "--confirm",
        str(run2),
    )
    assert rc == 0, err
    assert "leaves " in out and "incomplete: empty" in out
    assert "verified: 3 of 3 kept file(s) re-verified by sha256" in out


def test_an_empty_folder_with_a_huge_step_and_a_name_with_a_newline_are_not_checkpoints(h1, capsys):
    fleet, host = h1
    run = make_run(host.runs, uniq(), steps=(100, 200), adapter=False)
    huge = run / "checkpoints" / "checkpoint-99999999999999999999"
    huge.mkdir()
    nl = run / "checkpoints" / "checkpoint-400\n"
    nl.mkdir()
    (nl / "adapter_model.safetensors").write_bytes(safetensors(os.urandom(64)))
    (nl / "adapter_config.json").write_text("{}")
    rc, doc, err = keep(capsys, fleet, run, 1)
    assert rc == 0, err
    assert doc["keep_newest"]["kept"] == [str(ck(run, 200))]
    assert [p["path"] for p in doc["paths"]] == [str(ck(run, 100))]
    assert doc["keep_newest"]["checkpoints"] == [[100, str(ck(run, 100))], [200, str(ck(run, 200))]]
    ignored = {i["path"]: i["why"] for i in doc["keep_newest"]["ignored"]}
    assert ignored == {
        str(huge): "its step is past 2**63 - 1",
        str(nl): "it is not a whole checkpoint-<step> name",
    }
    assert any("checkpoint-400\\n is not counted as a checkpoint" in w for w in doc["warnings"])
    assert sorted(names(run)) == sorted(["checkpoint-200", huge.name, nl.name])


def test_fewer_complete_checkpoints_than_n_is_refused_no_keeper(h1, capsys):
    fleet, host = h1
    run = make_run(host.runs, uniq(), steps=(100, 200, 300), adapter=False)
    (ck(run, 200) / "adapter_model.safetensors").write_bytes(b"")  # zero-byte weights
    (ck(run, 300) / "adapter_config.json").unlink()  # no config
    rc, doc, err = keep(capsys, fleet, run, 2)
    assert rc == 1 and not doc["deleted"]
    r = doc["keep_newest"]["refusal"]
    assert r["code"] == "no-keeper"
    assert "1 complete checkpoint(s), fewer than the 2 to keep" in r["message"]
    assert "checkpoint-200 (adapter_model.safetensors is empty (0 bytes))" in r["message"]
    assert "checkpoint-300 (it holds no adapter_config.json)" in r["message"]
    assert names(run) == ["checkpoint-100", "checkpoint-200", "checkpoint-300"]


def test_a_kept_checkpoint_emptied_after_the_plan_refuses(h1, capsys):
    """The kept checkpoint is judged again when it is walked at execution."""
    import asyncio

    from fleetdeck.backend.actions.purge.main import execute_purge, gather_keep_newest
    from fleetdeck.backend.fleet.config import load_fleet
    from fleetdeck.backend.fleet.link.ssh import HostLink

    fleet, host = h1
    run = make_run(host.runs, uniq(), steps=(100, 200), adapter=False)

    async def go():
        link = HostLink(load_fleet(str(fleet)).host(HOST))
        try:
            plan = await gather_keep_newest(link, str(run), 1)
            assert plan.ok
            for p in ck(run, 200).iterdir():
                p.unlink()
            return await execute_purge(link, plan, {str(run): str(run)}, via="test")
        finally:
            await link.close()

    rep = asyncio.run(go())
    assert (
        not rep.deleted and not rep.verified and names(run) == ["checkpoint-100", "checkpoint-200"]
    )
    assert "no-keeper" in {c for p in rep.paths for c in p.refused}


def test_a_purge_nothing_witnesses_is_refused(h1, capsys):
    """A folder that holds no checkpoint of a run has no keeper to hash: refused no-witness."""
    fleet, host = h1
    junk = host.runs / uniq("scratch")
    (junk / "sub").mkdir(parents=True)
    (junk / "sub" / "f").write_bytes(b"x")
    rc, out, err = cli(
        capsys, "purge", "--hosts", str(fleet), HOST, str(junk), "--confirm", str(junk), "--json"
    )
    doc = json.loads(out)
    assert rc == 1 and not doc["deleted"] and not doc["verified"] and doc["witnesses"] == 0
    assert doc["paths"][0]["refused"] == ["no-witness"] and junk.exists()


def test_an_empty_set_of_keepers_never_reads_verified():
    empty = PurgeReport(
        host="h",
        deleted=True,
        paths=(),
        keepers=(),
        free_bytes_before=None,
        free_bytes_after=None,
        expected_bytes=0,
        warnings=(),
        confirmed=True,
    )
    assert not empty.verified and not empty.ok
    assert empty.verified_by == "no kept file witnessed this purge"
    one = PurgeReport(
        host="h",
        deleted=True,
        paths=(),
        keepers=(KeeperResult("/a", "/r", "x", "x"),),
        free_bytes_before=None,
        free_bytes_after=None,
        expected_bytes=0,
        warnings=(),
        confirmed=True,
    )
    assert one.verified and one.to_json()["witnesses"] == 1


def test_the_best_eval_checkpoint_needs_its_own_confirmation(h1, capsys):
    """The final adapter is not the best checkpoint (different weights): deleting checkpoint-50,
    the best eval loss, is refused best-eval until its path is typed with --allow-best."""
    fleet, host = h1
    run = make_run(host.runs, uniq(), steps=(25, 50, 75))
    with_evals(run, {25: 3.007, 50: 2.435, 75: 2.61})
    paths = [str(ck(run, s)) for s in (25, 50)]
    confirm = [x for p in paths for x in ("--confirm", p)]
    rc, out, err = cli(capsys, "purge", "--hosts", str(fleet), HOST, *paths, *confirm, "--json")
    doc = json.loads(out)
    assert rc == 1 and not doc["deleted"]
    assert [p["refused"] for p in doc["paths"]] == [[], ["best-eval"]]
    assert ck(run, 25).exists() and ck(run, 50).exists()

    rc, out, err = cli(capsys, "purge", "--hosts", str(fleet), HOST, *paths, "--dry-run")
    assert "eval loss of" in out and "best 2.435, NOT kept" in out
    assert (
        "checkpoint-50  step 50  2.4350  <- best" in out and "checkpoint-25  step 25  3.0070" in out
    )

    rc, out, err = cli(
        capsys,
        "purge",
        "--hosts",
        str(fleet),
        HOST,
        *paths,
        *confirm,
        "--allow-best",
        paths[0],
        "--json",
    )
    assert rc == 2 and "is not the best-eval checkpoint" in err and ck(run, 25).exists()

    rc, out, err = cli(
        capsys,
        "purge",
        "--hosts",
        str(fleet),
        HOST,
        *paths,
        *confirm,
        "--allow-best",
        paths[1],
        "--json",
    )
    assert rc == 0, err
    assert not ck(run, 25).exists() and not ck(run, 50).exists() and ck(run, 75).exists()


def test_the_best_eval_checkpoint_whose_weights_the_adapter_holds_goes_without_asking(h1, capsys):
    fleet, host = h1
    run = make_run(host.runs, uniq(), steps=(25, 50))
    with_evals(run, {25: 3.0, 50: 2.4})
    (run / "adapter" / "adapter_model.safetensors").write_bytes(
        (ck(run, 50) / "adapter_model.safetensors").read_bytes()
    )
    p = str(ck(run, 50))
    rc, out, err = cli(capsys, "purge", "--hosts", str(fleet), HOST, "--dry-run", "--json", p)
    doc = json.loads(out)
    assert rc == 0, err
    assert doc["evals"][0]["best"] == p and doc["evals"][0]["best_kept"] is True


def test_the_keep_rule_that_drops_the_best_needs_its_own_confirmation(h1, capsys):
    fleet, host = h1
    run = make_run(host.runs, uniq(), steps=(25, 50, 75), adapter=False)
    with_evals(run, {25: 2.0, 50: 2.5, 75: 2.7})
    rc, doc, err = keep(capsys, fleet, run, 1)
    assert rc == 1 and not doc["deleted"]
    assert doc["paths"][0]["refused"] == ["best-eval"] and names(run) == [
        f"checkpoint-{s}" for s in (25, 50, 75)
    ]
    rc, doc, err = keep(capsys, fleet, run, 1, "--allow-best", str(ck(run, 25)))
    assert rc == 0, err
    assert names(run) == ["checkpoint-75"]


def test_the_layout_rule_for_a_complete_checkpoint(tmp_path):
    assert layout.checkpoint_step("checkpoint-400") == 400
    assert layout.checkpoint_step("checkpoint-400\n") is None
    assert layout.checkpoint_step("checkpoint-9223372036854775807") == (1 << 63) - 1
    assert layout.checkpoint_step("checkpoint-9223372036854775808") is None
    assert (
        layout.checkpoint_step("checkpoint-\u0661") is None
    )  # an Arabic-Indic digit is not a step
    full = tmp_path / "full"
    full.mkdir()
    (full / "model.safetensors").write_bytes(safetensors(b"w"))
    assert layout.checkpoint_problem(str(full)) == "incomplete: it holds no config.json"
    (full / "config.json").write_text("{}")
    assert layout.checkpoint_problem(str(full)) is None
    sharded = tmp_path / "sharded"
    sharded.mkdir()
    (sharded / "config.json").write_text("{}")
    (sharded / "model.safetensors.index.json").write_text(
        json.dumps(
            {
                "weight_map": {
                    "a": "model-00001-of-00002.safetensors",
                    "b": "model-00002-of-00002.safetensors",
                }
            }
        )
    )
    (sharded / "model-00001-of-00002.safetensors").write_bytes(safetensors(b"w", name="a"))
    assert (
        layout.checkpoint_problem(str(sharded))
        == "incomplete: it holds no model-00002-of-00002.safetensors"
    )
    (sharded / "model-00002-of-00002.safetensors").write_bytes(safetensors(b"w", name="c"))
    assert "maps b to model-00002-of-00002.safetensors, whose header lacks it" in (
        layout.checkpoint_problem(str(sharded)) or ""
    )
    (sharded / "model-00002-of-00002.safetensors").write_bytes(safetensors(b"w", name="b"))
    assert layout.checkpoint_problem(str(sharded)) is None
    link = tmp_path / "link"
    link.symlink_to(full)
    assert layout.checkpoint_problem(str(link)) == "it is a symlink"


async def test_a_root_that_resolves_to_a_system_folder_on_the_host_is_no_root(tmp_path):
    """The fleet file cannot know what a link or a remote `~` resolves to; the helper judges the
    root it resolves: a runs root that is a link to /etc purges nothing under it."""
    from fleetdeck.backend.fleet.config import load_fleet

    from support.purge import plan_for

    link = tmp_path / "runs"
    link.symlink_to("/etc")
    fleet = tmp_path / "hosts.toml"
    fleet.write_text(
        f'[hosts.local]\nlocal = true\nruns = ["{link}"]\npython = "{os.sys.executable}"\n'
    )
    plan = await plan_for(load_fleet(str(fleet)).host("local"), ["/etc/ssh"])
    assert not plan.ok and plan.paths[0].refused == ["outside-roots"]
    assert "(a system folder: not used)" in plan.paths[0].refusals[0].message
    assert any("purge root" in w and "a system folder" in w for w in plan.warnings)


def test_a_fifo_named_trainer_state_or_weight_index_never_holds_the_check(tmp_path):
    """A checkpoint's trainer_state.json (read for its eval loss) or a full model's weight index
    that is a FIFO: the check answers at once (no eval loss; the index is no index)."""
    import subprocess
    import sys

    ck = tmp_path / "checkpoint-5"
    ck.mkdir()
    os.mkfifo(ck / "trainer_state.json")
    os.mkfifo(ck / "model.safetensors.index.json")
    (ck / "config.json").write_text("{}")
    code = (
        "import sys; from fleetdeck.backend.host.purge.evals import _eval_at; "
        "from fleetdeck.backend.host.lib import files, layout; import os; "
        "fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY); "
        "print(_eval_at(sys.argv[1], 5)); print(layout._index_problem(fd, 'model.safetensors.index.json')); "
        "print(layout.checkpoint_problem(sys.argv[1]))"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, str(ck)], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "None",
        "model.safetensors.index.json is not a regular file",
        "incomplete: model.safetensors.index.json is not a regular file",
    ]


def test_a_weight_index_past_its_limit_is_not_read_whole(tmp_path, monkeypatch):
    ck = tmp_path / "checkpoint-5"
    ck.mkdir()
    (ck / "config.json").write_text("{}")
    monkeypatch.setattr(layout, "INDEX_LIMIT", 64)
    (ck / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "x" * 100}}))
    assert (
        layout.checkpoint_problem(str(ck))
        == "incomplete: model.safetensors.index.json is larger than 64 bytes"
    )


def test_on_a_tie_the_trainers_own_best_model_checkpoint_is_the_best_and_named(h1, capsys):
    """Two evals tie (3.172, 3.172, the operator's plateau): the run's own trainer_state.json
    names the earlier as `best_model_checkpoint`, so that one is the best the plan protects."""
    fleet, host = h1
    run = make_run(host.runs, uniq(), steps=(25, 50, 75))
    with_evals(run, {25: 3.176, 50: 3.172, 75: 3.172})
    for step in (25, 50, 75):
        state = json.loads((ck(run, step) / "trainer_state.json").read_text())
        state["best_model_checkpoint"] = "/elsewhere/out/checkpoints/checkpoint-50"
        (ck(run, step) / "trainer_state.json").write_text(json.dumps(state))
    p = str(ck(run, 75))
    rc, out, err = cli(capsys, "purge", "--hosts", str(fleet), HOST, "--dry-run", "--json", p)
    doc = json.loads(out)
    assert rc == 0, err  # the later tie is not the best: it may go
    ev = doc["evals"][0]
    assert ev["best"] == str(ck(run, 50)) and ev["trainer_best"] == str(ck(run, 50))
    p50 = str(ck(run, 50))
    rc, out, err = cli(capsys, "purge", "--hosts", str(fleet), HOST, "--dry-run", "--json", p50)
    assert rc == 1 and "best-eval" in json.loads(out)["paths"][0]["refused"]
