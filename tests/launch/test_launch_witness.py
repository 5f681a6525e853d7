"""A pre-flight verdict is over the checks every launch is judged on: an answer with no checks,
or without one of them, is no pass (`missing-checks`), whatever its `passed` says."""

from __future__ import annotations

from fleetdeck.backend.actions.launch.result import Check, Preflight, preflight_from

FULL = [
    {"name": n, "ok": True, "message": f"{n} fine"}
    for n in ("base-model", "corpus", "output", "trainer")
]


def test_an_answer_without_checks_is_no_pass():
    pre = preflight_from("h1", {"passed": True, "checks": [], "run_path": "/r"})
    assert not pre.ok
    assert pre.refusal.name == "missing-checks"
    assert "base-model, corpus, trainer, output" in pre.refusal.message


def test_an_answer_missing_one_check_or_the_chain_is_no_pass():
    assert preflight_from("h1", {"checks": FULL, "run_path": "/r"}).ok
    pre = preflight_from(
        "h1", {"checks": [c for c in FULL if c["name"] != "trainer"], "run_path": "/r"}
    )
    assert (
        not pre.ok
        and pre.refusal.name == "missing-checks"
        and "trainer check" in pre.refusal.message
    )
    chained = preflight_from("h1", {"checks": FULL, "run_path": "/r", "after": "/runs/a"})
    assert not chained.ok and chained.missing == ("after",)
    resumed = Preflight(
        "h1",
        "/r",
        None,
        tuple(Check(c["name"], True, "") for c in FULL if c["name"] != "output")
        + (Check("resume", True, "resumes"),),
    )
    assert resumed.ok


def test_a_failed_check_is_still_the_refusal():
    checks = [
        dict(c, ok=False, message="corpus /c is empty") if c["name"] == "corpus" else c
        for c in FULL
    ]
    pre = preflight_from("h1", {"checks": checks, "run_path": "/r"})
    assert not pre.ok and pre.refusal.name == "corpus"
