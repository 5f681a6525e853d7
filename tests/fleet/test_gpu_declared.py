"""A GPU of a host's answer is checked by the probe's own declaration of it
(`backend/host/probe/wire.py`: `GpuRecord`, `GPU_BOUNDS`; `backend/fleet/validate_gpu.py`):
every declared figure refuses a value of another type, one past its bounds and, as text,
is escaped and cut; a figure added to the declaration is checked, kept in `status --json`
(and read back from it) and exported in /metrics with nothing else changed."""

from __future__ import annotations

import dataclasses
import json

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from fleetdeck.backend.fleet import validate_gpu
from fleetdeck.backend.fleet.models import FleetSnapshot, Gpu, GpuEcc, GpuPcie, GpuProcess, Xid
from fleetdeck.backend.fleet.validate import fleet_from_json, host_from_probe
from fleetdeck.backend.fleet.validate_fields import as_figure, as_flag, as_whole, as_words
from fleetdeck.backend.fleet.validate_gpu import plan_of
from fleetdeck.backend.host.probe import wire
from fleetdeck.backend.monitor.metrics.export import FleetCollector

EVIL = "x\x1b[2J\x1b]52;c;cm0gLXJmIH4=\x07\x9b31m\n\u202eok"
RAW = ("\x1b", "\x07", "\x9b", "\u202e", "\n")


def _figures(plan=None) -> list[tuple[str, object]]:
    """Every scalar figure the declaration plans a check for, by path, with its check."""
    out = []
    for _key, path, fn, _args, sub in (plan or plan_of(wire.GpuRecord, Gpu)).steps:
        out.extend(_figures(sub) if sub is not None else [(path, fn)])
    return out


FIGURES = _figures()


def _card(**figures: object) -> dict:
    card: dict = {
        "index": 0,
        "name": "H200",
        "uuid": "GPU-a",
        "unified_memory": False,
        "memory_total_mib": 1000.0,
        "memory_used_mib": 10.0,
        "utilization_pct": 1.0,
        "processes": [],
    }
    for path, v in figures.items():
        part, _, field = path.partition(".")
        if field:
            card.setdefault(part, {})[field] = v
        else:
            card[part] = v
    return card


def _host(*cards: dict, **top: object):
    return host_from_probe("h", {"gpus": list(cards), **top}, 1.0, 1000.0)


def _bad(fn: object) -> list[object]:
    """Values the check of `fn` must refuse: another type, and past any bound."""
    if fn is as_flag:
        return ["true", 1]
    if fn is as_whole:
        return ["7", 1.5, 10**30, True]
    if fn is as_figure:
        return ["7", float("inf"), 1e300, False]
    return [7, {"a": 1}]  # text and words


def test_the_plan_covers_every_declared_figure():
    assert {p for p, _ in FIGURES} >= {"temperature_c", "pcie.gen", "ecc.mode", "lost"}
    assert "processes" not in {p for p, _ in FIGURES}  # lists of records: read item by item
    assert {"ecc.mode", "compute_mode", "lost"} <= set(TEXTS)


@pytest.mark.parametrize("path,fn", FIGURES, ids=[p for p, _ in FIGURES])
def test_a_hostile_or_mistyped_figure_is_unknown_and_named(path, fn):
    """Each value of another type or past its bounds: the card stays, the figure is unknown
    (a flag the model holds as bool is false), and a warning names the card and the figure."""
    for v in _bad(fn):
        h = _host(_card(**{path: v}))
        (g,) = h.gpus
        assert g.figure(path) in (None, False), (path, v, g.figure(path))
        assert any(w.startswith(f"gpu #0 H200: {path}: ") for w in h.warnings), (path, v, h)


#: the declared texts: every figure that is not a number, a flag or a list of words
TEXTS = [p for p, fn in FIGURES if fn not in (as_whole, as_figure, as_flag, as_words)]


@pytest.mark.parametrize("path", TEXTS, ids=lambda p: p.replace(".", "-"))
def test_every_declared_text_is_escaped_and_cut(path):
    limit = wire.GPU_BOUNDS.get(path, 4096)
    (g,) = _host(_card(**{path: EVIL})).gpus
    shown = g.figure(path)
    assert "x" in shown and not any(b in shown for b in RAW), shown
    (g,) = _host(_card(**{path: "y" * 100_000})).gpus
    assert len(g.figure(path)) == limit and g.figure(path).endswith("…")


@pytest.mark.parametrize("path", [p for p, fn in FIGURES if fn is as_words])
def test_every_declared_list_of_words_is_escaped_and_cut(path):
    limit = wire.GPU_BOUNDS.get(path, 64)
    (g,) = _host(_card(**{path: [EVIL, "y" * 10_000]})).gpus
    evil, long = g.figure(path)
    assert "x" in evil and not any(b in evil for b in RAW), evil
    assert len(long) == limit and long.endswith("…")
    h = _host(_card(**{path: ["w"] * 33}))
    assert h.gpus[0].figure(path) is None and any(f": {path}: not a list" in w for w in h.warnings)


def test_a_bad_identity_leaves_the_card_out_and_the_others_stay():
    h = _host(_card(name=7), _card(index=1, uuid="GPU-b"))
    assert [g.uuid for g in h.gpus] == ["GPU-b"]
    assert any("quarantined: name: not text" in w for w in h.warnings)


def test_the_model_names_only_declared_figures():
    """A figure the model names is one the probe declares (one it does not name is kept in
    `Gpu.extra`, by the declaration); the lists of records have the models' fields exactly."""

    def names(model: type) -> set[str]:
        return {f.name for f in dataclasses.fields(model)}

    declared = set(wire.GpuRecord.__annotations__)
    assert names(Gpu) - {"extra"} <= declared
    assert names(GpuPcie) == set(wire.PcieRecord.__annotations__)
    assert names(GpuEcc) == set(wire.EccRecord.__annotations__)
    assert names(GpuProcess) == set(wire.GpuProcessRecord.__annotations__)
    assert names(Xid) == set(wire.XidRecord.__annotations__)


class _Pcie(wire.PcieRecord, total=False):
    replays: int | None


class _Planted(wire.GpuRecord, total=False):
    """The declaration with three figures more: a number with bounds (NVML's performance
    state, P0 to P15: docs/development.md, "A new GPU figure"), a nested number held to its
    type's defaults, a text."""

    performance_state: int | None
    pcie: _Pcie  # type: ignore[misc]
    board_part: str | None


def _shown(snap: FleetSnapshot) -> tuple[dict, str]:
    """What `status --json` prints (`FleetSnapshot.to_json`) and the /metrics text."""
    collector = FleetCollector()
    collector.update(snap, [], {})
    reg = CollectorRegistry()
    reg.register(collector)
    return json.loads(json.dumps(snap.to_json())), generate_latest(reg).decode()


def test_a_figure_added_to_the_declaration_reaches_status_json_and_metrics(monkeypatch):
    monkeypatch.setattr(wire, "GpuRecord", _Planted)
    monkeypatch.setitem(wire.GPU_BOUNDS, "performance_state", (0, 15))
    good = _card(performance_state=2, board_part="699-2G530" + EVIL, **{"pcie.replays": 3})
    good["pcie"]["gen"] = 5
    bad = _card(index=1, uuid="GPU-b", performance_state=32, **{"pcie.replays": "3"})
    h = _host(good, bad)
    g, b = h.gpus
    assert (g.figure("performance_state"), g.figure("pcie.replays"), g.pcie.gen) == (2, 3, 5)
    assert g.figure("board_part").startswith("699-2G530x") and "\x1b" not in g.figure("board_part")
    assert (b.figure("performance_state"), b.figure("pcie.replays")) == (None, None)
    assert "gpu #1 H200: performance_state: out of range (int 32)" in h.warnings
    assert "gpu #1 H200: pcie.replays: not a number (str '3')" in h.warnings
    # status --json: in the card's object, where the probe put it; read back the same
    snap = FleetSnapshot(hosts=(h,), time=1.0)
    doc, metrics = _shown(snap)
    card = doc["hosts"][0]["gpus"][0]
    assert (card["performance_state"], card["pcie"]["replays"], card["pcie"]["gen"]) == (2, 3, 5)
    unknown = doc["hosts"][0]["gpus"][1]  # unknown is null, as a named figure's is
    assert (unknown["performance_state"], unknown["board_part"]) == (None, None)
    again = fleet_from_json(doc).hosts[0].gpus[0]
    assert (again.figure("performance_state"), again.figure("pcie.replays")) == (2, 3)
    # /metrics: a family of its own, in its declared unit; the unknown one has no sample
    lab = 'gpu="0",host="h",uuid="GPU-a"'
    assert f"fleetdeck_gpu_performance_state{{{lab}}} 2.0" in metrics
    assert f"fleetdeck_gpu_pcie_replays{{{lab}}} 3.0" in metrics
    assert 'fleetdeck_gpu_performance_state{gpu="1"' not in metrics
    assert "board_part" not in metrics  # text is no sample


def test_every_declared_number_is_exported_or_left_out_by_name():
    """A number or flag has its family (GPU_FIGURES, one of the others, or one of its own:
    `declared`) or is named as left out (NOT_EXPORTED)."""
    from fleetdeck.backend.monitor.metrics.gpu import (
        ELSEWHERE,
        GPU_FIGURES,
        NOT_EXPORTED,
        declared,
    )

    numbers = {p for p, fn in FIGURES if fn in (as_whole, as_figure, as_flag)}
    exported = {key for key, *_ in GPU_FIGURES} | ELSEWHERE | set(declared())
    assert numbers - exported - NOT_EXPORTED == set()
    assert not (NOT_EXPORTED | ELSEWHERE) - numbers, "a name here the declaration lost"
    assert not set(declared()) & {key for key, *_ in GPU_FIGURES}, "exported twice"


@dataclasses.dataclass(frozen=True)
class _NamedGpu(Gpu):
    performance_state: int | None = None


def test_a_figure_the_model_comes_to_name_keeps_its_family(monkeypatch):
    """A declared figure given an attribute on `Gpu` leaves `Gpu.extra` and its /metrics
    family stays as it was, name, help and sample."""
    monkeypatch.setattr(wire, "GpuRecord", _Planted)
    monkeypatch.setitem(wire.GPU_BOUNDS, "performance_state", (0, 15))
    before = _shown(FleetSnapshot(hosts=(_host(_card(performance_state=2)),), time=1.0))[1]
    monkeypatch.setattr(validate_gpu, "Gpu", _NamedGpu)
    h = _host(_card(performance_state=2))
    assert h.gpus[0].performance_state == 2 and "performance_state" not in dict(h.gpus[0].extra)
    after = _shown(FleetSnapshot(hosts=(h,), time=1.0))[1]
    assert 'fleetdeck_gpu_performance_state{gpu="0",host="h",uuid="GPU-a"} 2.0' in after
    assert after == before
