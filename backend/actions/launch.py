"""Launch a training run on a host: pre-flight there, then the trainer detached there.

The controller parses RUN.toml (strictly, with the trainer's own parser) and sends its values to
the launch helper on the host (`host/launch/main.py`, bundled with `estimate`, `runfiles`,
`supervise` beside it and the host library), which checks, writes the host's own copy `<output>/RUN.toml`, claims
`<output>/run.json` (state `queued`) and starts a supervisor in a new session. The supervisor
starts `<python> -m fleetdeck.backend.train <output>/RUN.toml` (python: the host's `python` from
the fleet file) at once, or, with `after`, only when that run finished with a final adapter
(`host/lib/layout.final_adapter`); it marks the run `cancelled` when the prerequisite failed,
was cancelled, died or finished without one. With `resume` the output is a failed or stopped
run, continued from its newest checkpoint. The `live-run` check counts every run the probe
sees running on the host (a Hugging Face Trainer run as much as fleetdeck's own). Every launch
is audited.

A launch whose answer is lost after the request reached the host (the helper's output cut off,
unreadable, or replaced by an error) may still have started the run, so it is not reported
`failed` on that alone: the probe is asked what the output folder is now, and a run there that
was not running or queued before the launch is reported in the state the host shows, with a
`warning` saying the answer was lost.
"""

from __future__ import annotations

import asyncio
import os
import time
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from fleetdeck.backend.actions.audit import audit
from fleetdeck.backend.fleet.config import ConfigError, HostConfig
from fleetdeck.backend.fleet.errors import HostError
from fleetdeck.backend.fleet.link.boot import BOOT
from fleetdeck.backend.fleet.link.bundle import bundle
from fleetdeck.backend.fleet.link.ssh import HostLink
from fleetdeck.backend.fleet.models import Run
from fleetdeck.backend.fleet.poller import probe_request, probe_source
from fleetdeck.backend.fleet.validate import host_from_probe
from fleetdeck.backend.host.launch import main as launch_helper
from fleetdeck.backend.train.runconfig import config_to_dict, read_run_doc, run_config_from_doc

HELPER = launch_helper.__name__
PATH_KEYS = ("corpus", "output", "tokenizer", "base_model")
#: after a lost answer: how long a run still `queued` in its run.json (its trainer starting) is
#: asked about again before it is reported queued
SETTLE_S = 30.0


def helper_source() -> str:
    """The launch helper's payload as the host gets it (the helper, the estimates and the
    host library, one source text)."""
    return bundle(HELPER)


class Check(NamedTuple):
    """One pre-flight check: its name (the refusal's reason code), whether it passed, and why."""

    name: str
    ok: bool
    message: str


@dataclass(frozen=True)
class Preflight:
    """The host's answer to "may this run start?": every check and the estimate behind them."""

    host: str
    run_path: str
    after: str | None
    checks: tuple[Check, ...]
    estimate: dict[str, Any] = field(default_factory=dict)

    @property
    def missing(self) -> tuple[str, ...]:
        """The checks every launch is judged on that the host's answer lacks: the base model,
        the corpus, the trainer, the output (or the resume), and the chain's run when there is
        one. A verdict over fewer witnesses than these is no pass."""
        names = {c.name for c in self.checks}
        need = ["base-model", "corpus", "trainer"]
        if "resume" not in names:
            need.append("output")
        if self.after:
            need.append("after")
        return tuple(n for n in need if n not in names)

    @property
    def ok(self) -> bool:
        """True when the host answered every check a launch is judged on and each one passed."""
        return bool(self.checks) and not self.missing and all(c.ok for c in self.checks)

    @property
    def refusal(self) -> Check | None:
        """The first failing check (its name is the reason code); `missing-checks` when the
        answer lacks one a launch is judged on; or None."""
        bad = next((c for c in self.checks if not c.ok), None)
        if bad is None and self.missing:
            return Check(
                "missing-checks",
                False,
                "the host's pre-flight answer holds no {} check{}, so "
                "the launch cannot be judged; nothing was started by this check".format(
                    ", ".join(self.missing), "s" if len(self.missing) > 1 else ""
                ),
            )
        return bad

    def checks_json(self) -> list[dict[str, Any]]:
        """The checks as JSON objects."""
        return [c._asdict() for c in self.checks]


@dataclass(frozen=True)
class LaunchResult:
    """What a launch did. `state`: running, queued, cancelled (its prerequisite already ended
    badly), refused (a pre-flight check failed: `reason` is its name) or failed."""

    host: str
    run_path: str
    state: str
    pid: int | None
    preflight: Preflight
    after: str | None = None
    waiter_pid: int | None = None
    run_toml: str | None = None
    error: str | None = None
    reason: str | None = None
    #: set when the helper's answer was lost and the state is what the probe saw afterwards
    warning: str | None = None

    @property
    def ok(self) -> bool:
        """True when the run is running or queued (or, seen after a lost answer, already finished)."""
        return self.state in ("running", "queued", "finished")

    def to_json(self) -> dict[str, Any]:
        """The `launch --json` document."""
        return {
            "host": self.host,
            "run_path": self.run_path,
            "state": self.state,
            "pid": self.pid,
            "after": self.after,
            "waiter_pid": self.waiter_pid,
            "run_toml": self.run_toml,
            "error": self.error,
            "reason": self.reason,
            "preflight": self.preflight.checks_json(),
            "estimate": self.preflight.estimate,
            "warning": self.warning,
        }


def _host_path(value: str, key: str, host: HostConfig, base: Path, source: str) -> str:
    """A path as the host will read it: absolute or `~` as written; relative only for `local`."""
    if value.startswith("~") or value.startswith("/"):
        return value
    if host.local:
        return str((base / value).absolute())
    raise ConfigError(
        f"{source}: key {key!r} is a relative path ({value!r}); for remote host "
        f"{host.name} write it absolute or starting with ~/"
    )


def run_values(run: str | os.PathLike[str] | dict[str, Any], host: HostConfig) -> dict[str, Any]:
    """RUN.toml (a file, or its values as a dict) checked strictly, as JSON-able values with the
    paths as the host reads them. ConfigError names the file and the key."""
    if isinstance(run, dict):
        doc, source, base = dict(run), "RUN.toml values", Path.cwd()
    else:
        p = Path(run)
        doc, source, base = read_run_doc(p), str(p), p.absolute().parent
    # the trainer's own parser: unknown keys and wrong types fail here, before any host is asked
    for key in PATH_KEYS:
        if key in doc and not isinstance(doc[key], str):
            raise ConfigError(f"{source}: key {key!r} must be a string, not {doc[key]!r}")
    values = config_to_dict(run_config_from_doc(doc, source, base))
    values.pop("source", None)
    for key in PATH_KEYS:
        raw = doc.get(key)
        if raw is None or (key == "base_model" and raw.startswith("random:")):
            continue
        values[key] = _host_path(raw, key, host, base, source)
    return values


def _after_path(after: str | None, host: HostConfig) -> str | None:
    if after is None:
        return None
    return _host_path(after, "--after", host, Path.cwd(), "--after")


def _request(
    op: str,
    host: HostConfig,
    values: dict[str, Any],
    after: str | None,
    force: bool,
    poll_interval: float,
    resume: bool,
    live: list[dict[str, Any]],
) -> dict[str, Any]:
    return {
        "op": op,
        "host": host.name,
        "config": values,
        "after": after,
        "force": force,
        "resume": resume,
        "live": live,
        "runs": list(host.runs),
        "interval": poll_interval,
        "boot": BOOT,
        "source": helper_source(),
    }


RUN_TOML_LIMIT = 1 << 20


async def read_run_toml(link: HostLink, run_path: str) -> dict[str, Any] | None:
    """The RUN.toml a run was launched with, read from its folder on the host (bounded, as
    any command's output), parsed; None when the folder holds none (not started by `launch`).
    HostError when the host cannot be asked; ValueError naming the file when it is not TOML."""
    res = await link.run(["cat", "--", f"{run_path}/RUN.toml"], timeout=10, limit=RUN_TOML_LIMIT)
    if res.returncode != 0:
        return None
    try:
        return tomllib.loads(res.stdout.decode("utf-8", "replace"))
    except ValueError as e:
        raise ValueError(f"{run_path}/RUN.toml on {link.name} is not valid TOML: {e}") from None


def live_json(runs: Iterable[Run]) -> list[dict[str, Any]]:
    """The runs a probe saw `running`, as the helper's `live` list."""
    return [{"path": r.path, "pid": r.pid, "name": r.name} for r in runs if r.state == "running"]


async def runs_seen(link: HostLink) -> tuple[Run, ...]:
    """Every run the probe sees on the link's host now (one one-shot probe). HostError when
    the probe cannot answer: without it no live run could be ruled out."""
    answer = await link.run_helper(probe_source(), probe_request(link.host), what="probe")
    if not isinstance(answer, dict) or ("error" in answer and "runs" not in answer):
        err = answer.get("error") if isinstance(answer, dict) else answer
        msg = err.get("message") if isinstance(err, dict) else err
        raise HostError(link.name, f"the probe could not list the runs on the host: {msg}", "probe")
    return host_from_probe(link.name, answer, 0.0, 0.0).runs


def _error_text(answer: dict[str, Any]) -> str | None:
    err = answer.get("error")
    if isinstance(err, dict):
        return str(err.get("message") or err.get("code"))
    return None if err is None else str(err)


def _preflight_from(host: str, answer: dict[str, Any]) -> Preflight:
    if not isinstance(answer, dict) or "checks" not in answer:
        what = _error_text(answer) if isinstance(answer, dict) else repr(answer)
        raise HostError(host, f"launch helper answered without checks: {what}", "helper")
    checks = tuple(
        Check(str(c["name"]), bool(c["ok"]), str(c["message"])) for c in answer["checks"]
    )
    return Preflight(
        host=host,
        run_path=str(answer.get("run_path") or ""),
        after=answer.get("after"),
        checks=checks,
        estimate=dict(answer.get("estimate") or {}),
    )


async def preflight(
    link: HostLink,
    run: str | os.PathLike[str] | dict[str, Any],
    after: str | None = None,
    force: bool = False,
    resume: bool = False,
    live: Iterable[Run] | None = None,
) -> Preflight:
    """Every launch check on the host, nothing changed there. `live`: the host's runs from a
    poll just made (else the probe is asked now). ConfigError for a bad RUN.toml, HostError
    when the host cannot be asked."""
    host_cfg = link.host
    values = run_values(run, host_cfg)
    seen = live_json(await runs_seen(link) if live is None else live)
    req = _request(
        "preflight", host_cfg, values, _after_path(after, host_cfg), force, 2.0, resume, seen
    )
    answer = await link.run_helper(helper_source(), req)
    return _preflight_from(host_cfg.name, answer)


async def launch(
    link: HostLink,
    run: str | os.PathLike[str] | dict[str, Any],
    after: str | None = None,
    force: bool = False,
    poll_interval: float = 2.0,
    resume: bool = False,
    live: Iterable[Run] | None = None,
) -> LaunchResult:
    """Pre-flight, then start the run detached on the host (or queue it after `after`); returns
    as soon as the trainer (or the waiter) runs. `resume`: continue the failed or stopped run in
    the output folder from its newest checkpoint. `live` as for `preflight`. Audited whatever
    happens. ConfigError for a bad RUN.toml (not audited: nothing was asked of the host),
    HostError when the host fails."""
    host_cfg = link.host
    values = run_values(run, host_cfg)
    after_path = _after_path(after, host_cfg)
    asked = False
    try:
        before = tuple(await runs_seen(link) if live is None else live)
        req = _request(
            "launch", host_cfg, values, after_path, force, poll_interval, resume, live_json(before)
        )
        asked = True
        answer = await link.run_helper(helper_source(), req)
        pre = _preflight_from(host_cfg.name, answer)
    except HostError as e:
        found = await started_anyway(link, str(values["output"]), before) if asked else None
        if found is not None:
            return _lost_answer_result(host_cfg, found, after_path, e, force, resume)
        audit(
            "launch",
            host_cfg.name,
            "failed",
            run=values.get("output"),
            after=after_path,
            error=e.message,
            force=force,
            resume=resume,
        )
        raise
    bad = pre.refusal
    state = str(answer.get("state") or ("refused" if bad else "failed"))
    if state == "refused" and bad is not None:
        error: str | None = bad.message
    else:
        error = _error_text(answer)
    result = LaunchResult(
        host=host_cfg.name,
        run_path=pre.run_path,
        state=state,
        pid=answer.get("pid"),
        preflight=pre,
        after=pre.after,
        waiter_pid=answer.get("waiter_pid"),
        run_toml=answer.get("run_toml"),
        error=error,
        reason=bad.name if (state == "refused" and bad) else None,
    )
    audit(
        "launch",
        host_cfg.name,
        {"running": "started"}.get(state, state),
        run=result.run_path,
        pid=result.pid,
        state=state,
        after=result.after,
        force=force,
        resume=resume,
        waiter_pid=result.waiter_pid,
        preflight=pre.checks_json(),
        error=error,
        reason=result.reason,
    )
    return result


def _same_run_path(seen: str, output: str) -> bool:
    """Whether the probe's (expanded) path `seen` is the output as RUN.toml wrote it for the host."""
    if output.startswith("~/"):
        return seen.rstrip("/").endswith(output[1:].rstrip("/"))
    return os.path.normpath(seen) == os.path.normpath(output)


async def started_anyway(link: HostLink, output: str, before: Iterable[Run]) -> Run | None:
    """After a launch whose answer was lost: the run the probe now sees at `output`, when it was
    not already running or queued before the launch (so this launch started it); None when the
    probe sees none there or cannot answer. A run whose run.json still says `queued` (its
    trainer starting, no chain) is asked about again for up to SETTLE_S."""
    was = {r.path: r.state for r in before}
    deadline = time.monotonic() + SETTLE_S
    while True:
        try:
            runs = await runs_seen(link)
        except HostError:
            return None
        run = next((r for r in runs if _same_run_path(r.path, output)), None)
        if run is None or was.get(run.path) in ("running", "queued"):
            return None
        if run.state != "queued" or time.monotonic() >= deadline:
            return run
        await asyncio.sleep(1.0)


def _lost_answer_result(
    host_cfg: HostConfig, run: Run, after: str | None, e: HostError, force: bool, resume: bool
) -> LaunchResult:
    warning = (
        f"the launch helper's answer was lost ({e.message}); the host shows the run "
        f"{run.state}" + (f" ({run.reason})" if run.reason else "")
    )
    ok = run.state in ("running", "queued", "finished")
    result = LaunchResult(
        host=host_cfg.name,
        run_path=run.path,
        state=run.state,
        pid=run.pid,
        preflight=Preflight(host=host_cfg.name, run_path=run.path, after=after, checks=()),
        after=after,
        error=None if ok else (run.reason or f"the run is {run.state}"),
        warning=warning,
    )
    audit(
        "launch",
        host_cfg.name,
        {"running": "started"}.get(run.state, run.state),
        run=run.path,
        pid=run.pid,
        state=run.state,
        after=after,
        force=force,
        resume=resume,
        error=result.error,
        warning=warning,
    )
    return result


__all__ = [
    "Check",
    "Preflight",
    "LaunchResult",
    "preflight",
    "launch",
    "run_values",
    "helper_source",
    "runs_seen",
    "live_json",
    "started_anyway",
]
