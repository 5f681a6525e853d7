"""House rules of the host wing (backend/host/): no function past complexity 25 (ruff's C901,
mccabe's count), a family of modules is a package, and purge's verdict is one small function per
refusal code, folded in `CHECKS` order."""

from __future__ import annotations

import subprocess
from pathlib import Path

from support.ruff_gate import complexity

REPO = Path(__file__).resolve().parents[2]
HOST = REPO / "backend" / "host"
MAX_COMPLEXITY = 25


def _complexity(*paths: str | Path) -> subprocess.CompletedProcess[str]:
    return complexity(MAX_COMPLEXITY, *paths)


def test_no_function_under_the_host_wing_is_over_complexity_25():
    p = _complexity("backend/host")
    assert p.returncode == 0, p.stdout + p.stderr


def test_the_complexity_gate_catches_a_function_over_25(tmp_path: Path):
    body = "".join(f"    if x == {i}:\n        return {i}\n" for i in range(MAX_COMPLEXITY))
    (tmp_path / "branchy.py").write_text(f"def branchy(x):\n{body}    return -1\n")
    p = _complexity(tmp_path / "branchy.py")
    assert p.returncode != 0 and "C901" in p.stdout and "branchy" in p.stdout, p.stdout + p.stderr


def test_no_family_of_prefixed_modules_in_the_host_wing():
    """purge, mirror, launch and schedules are packages (`main` plus its parts), as the probe
    is: no `purge_*.py` beside them again."""
    loose = sorted(
        p.name
        for p in HOST.glob("*_*.py")
        if p.stem.split("_")[0] in ("purge", "mirror", "launch", "schedules")
    )
    assert not loose, loose
    for family in ("probe", "purge", "mirror", "launch", "schedules", "seat_check"):
        assert (HOST / family / "main.py").is_file() and (
            HOST / family / "__init__.py"
        ).is_file(), family
        assert not (HOST / f"{family}.py").exists(), family


def test_the_controller_names_the_packaged_helpers_by_their_modules():
    from fleetdeck.backend.actions import schedules
    from fleetdeck.backend.actions.launch import main as launch
    from fleetdeck.backend.actions.mirror import common as mirror_common
    from fleetdeck.backend.actions.purge import main as purge
    from fleetdeck.backend.host.launch import main as launch_main
    from fleetdeck.backend.host.mirror import main as mirror_main
    from fleetdeck.backend.host.purge import main as purge_main
    from fleetdeck.backend.host.schedules import main as schedules_main

    assert (purge.HELPER, mirror_common.HELPER, launch.HELPER, schedules.REMOTE) == (
        purge_main.__name__,
        mirror_main.__name__,
        launch_main.__name__,
        schedules_main.__name__,
    )
    for path in (
        "actions/purge/main.py",
        "actions/mirror/common.py",
        "actions/launch/main.py",
        "actions/schedules.py",
    ):
        text = (REPO / "backend" / path).read_text(encoding="utf-8")
        assert 'HELPER = "' not in text and 'REMOTE = "' not in text, path


def test_purge_verdict_is_one_check_per_refusal_code_in_checks_order():
    """`_refuse_walk` stands for every walk code; each other code has its own function. The
    order is CHECKS order, save the scan's `unreadable` (a walk code), reported after
    `overlapping` as before."""
    from fleetdeck.backend.host.purge import verdict
    from fleetdeck.backend.host.purge.paths import WALK_CODES

    codes = [f.__name__.removeprefix("_refuse_").replace("_", "-") for f in verdict.PATH_CHECKS]
    assert codes[0] == "walk"
    assert len(codes) == len(set(codes)) and set(codes[1:]) | set(WALK_CODES) == set(
        verdict.CHECKS
    ), codes
    assert [c for c in codes[1:] if c != "unreadable"] == [
        c for c in verdict.CHECKS if c not in WALK_CODES
    ]
    assert codes.index("unreadable") == codes.index("overlapping") + 1


def test_the_run_state_is_one_rule_per_reason():
    from fleetdeck.backend.host.probe import run_state

    assert [r.__name__ for r in run_state.RULES] == [
        "_by_own_word",
        "_by_final_adapter",
        "_by_trainer_gone",
        "_by_live_process",
        "_by_worker_gone",
        "_by_pid_without_start_time",
        "_by_nothing",
    ]
