"""A purge plan as the host makes one, and every pop-up the dashboard opens."""

from __future__ import annotations

from fleetdeck.backend.actions.purge.plan import Keeper, PathPlan, PurgePlan, Refusal
from fleetdeck.backend.actions.schedules import RemovalCheck
from fleetdeck.tui.modals.dialogs import ErrorModal, HelpScreen
from fleetdeck.tui.modals.launch import LaunchModal
from fleetdeck.tui.modals.mirror import MirrorModal
from fleetdeck.tui.modals.purge import PurgeModal
from fleetdeck.tui.modals.remove import RemoveScheduleModal

RUN = "/home/ops/runs/run-7"


CHECKS = (
    "not-found",
    "symlink",
    "outside-roots",
    "is-root",
    "holds-final-adapter",
    "in-use",
    "container-mount",
    "mounted",
    "no-keeper",
)


GIB = 1024**3


def path_plan(step, refusals=()):
    failed = {r.code for r in refusals}
    return PathPlan(
        path=f"{RUN}/checkpoints/checkpoint-{step}",
        resolved=f"{RUN}/checkpoints/checkpoint-{step}",
        bytes=8 * GIB,
        expected_bytes=8 * GIB,
        refusals=tuple(refusals),
        checks=tuple((c, "fail" if c in failed else "pass") for c in CHECKS),
        pins=(),
        free_bytes=3281 * GIB,
        fstype="ext4",
        runs=(RUN,),
    )


def purge_plan(refused=False):
    bad = (
        (Refusal("in-use", "pid 41233 (python) has checkpoint-50/adapter_model.safetensors open"),)
        if refused
        else ()
    )
    return PurgePlan(
        host="gx10",
        paths=(path_plan(25), path_plan(50, bad)),
        keepers=(
            Keeper(
                f"{RUN}/adapter/adapter_model.safetensors",
                RUN,
                160 * 1024**2,
                "9f2c1e0a7b3d5e8f" * 4,
                (1, 2, 3, 4),
            ),
        ),
        roots=(("~/runs", "/home/ops/runs"),),
        free_bytes_before=3281 * GIB,
        expected_bytes=16 * GIB,
        warnings=(),
    )


def open_purge(app):
    plan = purge_plan()
    app.push_screen(PurgeModal("gx10", [p.path for p in plan.paths], plan=plan))


def open_remove(app):
    s = app.state.schedule("ana-ml2", "loop-9c1e55aa")
    app.push_screen(
        RemoveScheduleModal(
            s,
            check=RemovalCheck(
                host="ana-ml2",
                schedule_id=s.id,
                kind=s.kind,
                ok=True,
                reason_code=None,
                message="still there",
            ),
        )
    )


MODALS = {
    "help": (lambda app: app.push_screen(HelpScreen()), HelpScreen),
    "error": (
        lambda app: app.push_screen(ErrorModal("drawing", "Traceback ...\nKeyError: 'x'")),
        ErrorModal,
    ),
    "purge": (open_purge, PurgeModal),
    "mirror": (
        lambda app: app.push_screen(MirrorModal("gx10", "/home/ops/runs/run-6/adapter")),
        MirrorModal,
    ),
    "remove": (open_remove, RemoveScheduleModal),
    "launch": (lambda app: app.push_screen(LaunchModal("gx10", "runs/run-8.toml")), LaunchModal),
}
