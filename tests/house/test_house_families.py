"""A family of modules is a package, in every wing: three or more modules of one folder that
share the first word of their names (`history_db.py`, `history_query.py`, `history_values.py`)
are one thing cut in parts, and live in a folder of their own named for it
(`backend/monitor/history/`), as the host wing's helpers and the monitor's families do.

`KNOWN` lists the families still loose, each with why; it only shrinks: an entry that no
longer matches a family fails too."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
WINGS = ("backend", "cli", "show", "tui")

#: (folder, first word): why it is still loose
KNOWN = {
    ("backend/fleet", "validate"): "the answer's validation by part; to become a package",
    ("backend/host/probe", "run"): "the probe's run readers, already inside the probe's package",
    ("backend/train", "reference"): "the reference trainers the benchmark runs beside fleetdeck's",
    ("cli", "schedule"): "the CLI is one module per command: `schedules ack`, `poll`, `remove`",
    ("cli", "mcp"): "the CLI is one module per command: `mcp`, its read and propose tools",
}


def families(root: Path = REPO) -> dict[tuple[str, str], list[str]]:
    """Every folder's families: (folder, first word) -> its modules, for 3 or more."""
    out: dict[tuple[str, str], list[str]] = {}
    for wing in WINGS:
        for d in [root / wing, *(root / wing).rglob("*")]:
            if not d.is_dir() or "__pycache__" in d.parts:
                continue
            by: dict[str, list[str]] = defaultdict(list)
            for p in d.glob("*.py"):
                if p.stem != "__init__":
                    by[p.stem.split("_")[0]].append(p.stem)
            for word, stems in by.items():
                if len(stems) >= 3:
                    out[(str(d.relative_to(root)), word)] = sorted(stems)
    return out


def test_every_family_of_modules_is_a_package():
    found = families()
    loose = {k: v for k, v in found.items() if k not in KNOWN}
    assert not loose, "make each a package named for it:\n" + "\n".join(
        f"{folder}/: {', '.join(stems)}" for (folder, _), stems in sorted(loose.items())
    )
    gone = sorted(k for k in KNOWN if k not in found)
    assert not gone, f"no longer a loose family, strike from KNOWN: {gone}"


def test_the_family_rule_sees_a_planted_family(tmp_path):
    d = tmp_path / "backend" / "monitor"
    d.mkdir(parents=True)
    for name in ("history", "history_db", "history_query", "alerts"):
        (d / f"{name}.py").write_text("")
    assert families(tmp_path) == {
        ("backend/monitor", "history"): ["history", "history_db", "history_query"]
    }
