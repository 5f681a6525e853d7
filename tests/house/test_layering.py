"""The backend is headless and the dashboard never loads the training stack (checked in a
fresh interpreter, since this test process may already have imported anything)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def loaded_after(stmt: str) -> set[str]:
    code = f"import sys\n{stmt}\nprint('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    return set(out.stdout.split())


def test_backend_loads_no_ui():
    mods = loaded_after(
        "import fleetdeck.backend, fleetdeck.backend.fleet.poller, fleetdeck.backend.fleet.config, "
        "fleetdeck.backend.fleet.link.ssh, fleetdeck.backend.fleet.models, fleetdeck.backend.actions.audit"
    )
    assert not {m for m in mods if m.split(".")[0] in ("textual", "rich")}
    assert not {m for m in mods if m.startswith("fleetdeck.tui")}


def test_dashboard_and_cli_load_no_torch():
    mods = loaded_after(
        "import fleetdeck.tui, fleetdeck.cli.main; fleetdeck.cli.main.build_parser()"
    )
    assert not {m for m in mods if m.split(".")[0] in ("torch", "transformers", "peft")}


def test_probe_payload_needs_nothing_on_the_host():
    """The probe's payload runs on a host with nothing installed: it imports only the standard
    library, the fleetdeck modules it carries, and the pynvml it carries."""
    from fleetdeck.backend.fleet.link.bundle import bundle

    src = bundle("fleetdeck.backend.host.probe.main")
    code = (
        "import sys, builtins\nreal = builtins.__import__\n"
        "def guard(name, globals=None, locals=None, fromlist=(), level=0):\n"
        "    top = name.split('.')[0]\n"
        "    if top in ('asyncssh', 'rich', 'textual', 'torch', 'transformers', 'peft', 'psutil'):\n"
        "        raise ImportError('probe imported ' + name)\n"
        "    if top == 'fleetdeck' and name not in sys.modules:\n"
        "        raise ImportError('probe imported a module it does not carry: ' + name)\n"
        "    return real(name, globals, locals, fromlist, level)\n"
        "builtins.__import__ = guard\n"
        'sys.argv = [\'probe\', \'{"op": "snapshot", "runs": []}\']\n'
        "src = sys.stdin.read()\n"
        "exec(compile(src, 'probe', 'exec'), {'__name__': '__main__', '__builtins__': builtins})\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", code], input=src, capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 0, p.stderr
    assert '"ok": true' in p.stdout and "probe imported" not in p.stdout + p.stderr


def test_import_linter_contracts_hold():
    lint = shutil.which("lint-imports")
    if lint is None:
        pytest.fail("import-linter is part of the dev extra: pip install -e '.[dev]'")
    p = subprocess.run([lint], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr


def test_every_command_is_registered():
    """cli/main.py imports its command modules itself: every module under cli/ with a
    register() is one of its COMMANDS (or, while it still imports cli.main, one it registers by
    name), and each adds its subcommand, so a command module main forgot fails here and a
    missing one fails at import."""
    import ast

    from fleetdeck.cli import main as cli

    commands = {
        p.stem
        for p in (REPO / "cli").glob("*.py")
        if any(
            isinstance(n, ast.FunctionDef) and n.name == "register"
            for n in ast.parse(p.read_text(encoding="utf-8")).body
        )
    }
    named = {m for m, _ in cli.COMMANDS}
    assert commands == named, (sorted(commands - named), sorted(named - commands))
    for mod, names in cli.COMMANDS:  # the table main reads to import one module per command
        alone = cli.build_parser(names[0])
        sub = next(a for a in alone._actions if a.__class__.__name__ == "_SubParsersAction")
        assert tuple(sub.choices) == names, (mod, tuple(sub.choices), names)
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    assert {"tui", "runs", "verify", "bench", "holders"} | (commands - {"dashboard"}) <= set(
        sub.choices
    )


def test_ruff_is_clean():
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.fail("ruff is part of the dev extra: pip install -e '.[dev]'")
    p = subprocess.run([ruff, "check", "."], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr


def test_the_tree_is_formatted():
    """`ruff format` is the house's formatter (docs/development.md): a file it would change
    fails here, with the diff."""
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.fail("ruff is part of the dev extra: pip install -e '.[dev]'")
    p = subprocess.run(
        [ruff, "format", "--diff", "."], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 0, (p.stdout + p.stderr)[-6000:]


def _wings() -> list[str]:
    """The top-level packages of fleetdeck, as pyproject installs them (fleetdeck itself is a
    namespace, which grimp does not walk)."""
    import tomllib

    cfg = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    return sorted(cfg["package-dir"])


def _cycles(g) -> list[list[str]]:
    """The circles of imports in grimp graph `g`, each the sorted modules of one strongly
    connected component of two or more (Tarjan's algorithm)."""
    mods = sorted(g.modules)
    adj = {m: set(g.find_modules_directly_imported_by(m)) for m in mods}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in adj[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for m in mods:
        if m not in index:
            visit(m)
    return cycles


def _said(g, cycles: list[list[str]]) -> str:
    """Each circle with the import lines that close it."""

    def where(a: str, b: str) -> str:
        lines = ", ".join(
            str(d["line_number"]) for d in g.get_import_details(importer=a, imported=b)
        )
        return f"{a} -> {b} (line {lines})"

    return "\n".join(
        " <-> ".join(c)
        + ": "
        + "; ".join(
            where(a, b) for a in c for b in sorted(g.find_modules_directly_imported_by(a)) if b in c
        )
        for c in cycles
    )


def _graph(*packages: str):
    """Every import between the modules of `packages`: function-local ones and those under
    `if TYPE_CHECKING:` included."""
    import grimp

    return grimp.build_graph(
        *packages,
        include_external_packages=False,
        exclude_type_checking_imports=False,
        cache_dir=None,
    )


def test_no_import_cycle_in_fleetdeck():
    """No two modules of fleetdeck import each other, directly or round a circle, counting every
    import: a function-local one (one that dodges a cycle is a cycle) and one under
    `if TYPE_CHECKING:` (the type checker follows it, and a module typed against the app that
    imports it cannot be read, or moved, without the app). The dashboard's views reach the app
    through the `Dashboard` protocol (tui/app_api.py) and the app's view registry
    (tui/view_registry.py) instead."""
    g = _graph(*_wings())
    mods = sorted(g.modules)
    assert (
        any(m.startswith("fleetdeck.backend.train.") for m in mods)
        and "fleetdeck.cli.main" in mods
        and "fleetdeck.tui.app" in mods
    )
    cycles = _cycles(g)
    assert not cycles, _said(g, cycles)


def test_only_the_app_imports_the_views():
    """The dashboard's views are known to the app alone: it registers them, and navigation and
    help find them in that registry (tui/view_registry.py); the views, their pop-ups and the
    alert watch are typed against protocols (tui/app_api.py, `WatchedApp`), so nothing of the
    dashboard imports the app, which only `fleetdeck dashboard` starts."""
    g = _graph(*_wings())
    base = "fleetdeck.tui.views.base"
    screens = {base} | {
        m for m in g.find_modules_that_directly_import(base) if m.startswith("fleetdeck.tui.views.")
    }
    assert {"fleetdeck.tui.views.fleet", "fleetdeck.tui.views.host"} <= screens
    importers = {
        m: sorted(s for s in screens if s in g.find_modules_directly_imported_by(m))
        for s in screens
        for m in g.find_modules_that_directly_import(s)
        if not m.startswith("fleetdeck.tui.views.")
    }
    assert set(importers) == {"fleetdeck.tui.app"}, importers
    assert set(g.find_modules_that_directly_import("fleetdeck.tui.app")) == {
        "fleetdeck.cli.dashboard"
    }


def test_the_cycle_check_sees_deferred_and_type_checking_imports(tmp_path, monkeypatch):
    """A circle closed only by an import under `if TYPE_CHECKING:`, and one closed only by a
    function-local import, are both found (and named with their lines); a package whose imports
    run one way has none."""
    pkg = tmp_path / "circles"
    pkg.mkdir()
    files = {
        "__init__.py": "",
        "app.py": "from circles import view\n",
        "view.py": (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from circles.app import App\n"
        ),
        "watch.py": "def f():\n    from circles import screen  # deferred\n",
        "screen.py": "import circles.watch\n",
        "leaf.py": "import circles.app\n",
    }
    for name, text in files.items():
        (pkg / name).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    g = _graph("circles")
    cycles = _cycles(g)
    assert sorted(cycles) == [
        ["circles.app", "circles.view"],
        ["circles.screen", "circles.watch"],
    ], cycles
    said = _said(g, cycles)
    assert "circles.view -> circles.app (line 3)" in said and "(line 2)" in said, said
    (pkg / "view.py").write_text("X = 1\n")
    (pkg / "watch.py").write_text("X = 1\n")
    assert _cycles(_graph("circles")) == []


def _vermin(*paths: str) -> subprocess.CompletedProcess[str]:
    vermin = shutil.which("vermin")
    if vermin is None:
        pytest.fail("vermin is part of the dev extra: pip install -e '.[dev]'")
    return subprocess.run(
        [vermin, "-t=3.8-", "--no-tips", "--violations", *paths],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_host_wing_is_python_3_8():
    """Everything under backend/host/ runs on the host's Python 3.8: no syntax, module or
    function newer than that (a use guarded by hasattr says so with `# novm`)."""
    p = _vermin("backend/host")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "Analyzing" in p.stdout, p.stdout


def test_the_3_8_lint_catches_newer_python(tmp_path):
    (tmp_path / "newer.py").write_text(
        "def f(x):\n    match x:\n        case 1:\n            return 'a'.removeprefix('b')\n"
    )
    p = _vermin(str(tmp_path / "newer.py"))
    assert p.returncode != 0, p.stdout


def test_every_package_folder_is_installed():
    """A package folder missing from pyproject's `packages` works in an editable install and
    is absent from a built one: every folder with an `__init__.py` is listed, and nothing else."""
    import tomllib

    cfg = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    dirs = {name: REPO / folder for name, folder in cfg["package-dir"].items()}
    found = set()
    for name, root in dirs.items():
        for init in root.rglob("__init__.py"):
            rel = init.parent.relative_to(root).parts
            found.add(".".join((name, *rel)))
    assert found == set(cfg["packages"]), (
        sorted(found - set(cfg["packages"])),
        sorted(set(cfg["packages"]) - found),
    )


def test_every_fleetdeck_name_the_scripts_import_exists():
    """The benchmarks and the screenshot script are not imported by the suite: a module moved
    under them fails here, not when someone next runs them."""
    import ast
    import importlib

    scripts = sorted((REPO / "benchmarks").glob("*.py")) + sorted((REPO / "docs").glob("*.py"))
    assert scripts
    missing = []
    for path in scripts:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.module.startswith("fleetdeck")
            ):
                try:
                    mod = importlib.import_module(node.module)
                except ImportError as e:
                    missing.append(f"{path.name}: {node.module} ({e})")
                    continue
                for a in node.names:
                    if not hasattr(mod, a.name):
                        try:
                            importlib.import_module(f"{node.module}.{a.name}")
                        except ImportError:
                            missing.append(f"{path.name}: {node.module}.{a.name}")
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith("fleetdeck"):
                        try:
                            importlib.import_module(a.name)
                        except ImportError as e:
                            missing.append(f"{path.name}: {a.name} ({e})")
    assert not missing, missing
