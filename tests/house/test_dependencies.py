"""Every import is declared: each third-party module that `backend/`, `tui/` or `tests/` imports
(at the top or inside a function) comes from a distribution that pyproject.toml declares in the
extra the importing module belongs to, and what runs on a host imports only the standard library
and what its payload carries.

A package that is installed on the test machine but declared nowhere would otherwise pass every
other test and fail only for a user on a fresh virtual environment (`prometheus_client` did).

Which extra a module belongs to:
- `backend/train/`: the trainer, `train` (on top of the runtime requirements);
- the rest of `backend/` and `tui/`: the runtime requirements;
- `tests/`: `dev` (the README's test command installs `dev` and `train`).
`fa4` and `liger` extend the trainer: their packages may be imported only inside a function or
behind `except ImportError`, so that `import fleetdeck.backend.train` never needs them. An import
inside a `try` whose handler catches ImportError is optional: its distribution may come from any
extra, but it must be declared in one.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

from fleetdeck.backend.fleet.link.bundle import CARRIED, modules_for

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = ROOT / "pyproject.toml"

#: extras whose requirements a module of each group may import unconditionally
ALLOWED = {
    "runtime": {"runtime"},
    "train": {"runtime", "train"},
    "dev": {"runtime", "train", "dev"},
}
#: extras that extend another group: importable from that group inside a function or guarded
ADDONS = {"fa4": "train", "liger": "train"}
#: optional imports whose package the test environment does not install, by distribution
NOT_INSTALLED = {"flash_attn": "flash-attn-4", "liger_kernel": "liger-kernel"}
#: third-party modules a host-side module may import inside a function, where the host lacks it
#: is handled: the probe's memory falls back to psutil only where /proc/meminfo is missing (not
#: Linux), and an ImportError there becomes a warning in the snapshot
HOST_OPTIONAL = {"psutil"}
CATCHES_IMPORT_ERROR = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}


def normalized(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(req: str) -> str:
    m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req)
    assert m, req
    return normalized(m.group(1))


def declared(pyproject: dict) -> dict[str, set[str]]:
    """extra -> normalized distribution names; the plain requirements under `runtime`."""
    proj = pyproject["project"]
    out = {"runtime": {requirement_name(r) for r in proj.get("dependencies", [])}}
    for extra, reqs in proj.get("optional-dependencies", {}).items():
        out[extra] = {requirement_name(r) for r in reqs}
    return out


@dataclass(frozen=True)
class Import:
    module: str
    line: int
    local: bool  # inside a function: runs only when that function does
    guarded: bool  # inside a `try` whose handler catches ImportError

    @property
    def top(self) -> str:
        return self.module.split(".")[0]


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    names = {
        t.id if isinstance(t, ast.Name) else t.attr if isinstance(t, ast.Attribute) else ""
        for t in types
    }
    return bool(names & CATCHES_IMPORT_ERROR)


def imports_of(source: str, filename: str = "<src>") -> list[Import]:
    """Every absolute import in `source` (relative ones are first-party by construction)."""
    out: list[Import] = []

    def visit(node: ast.AST, local: bool, guarded: bool) -> None:
        if isinstance(node, ast.Import):
            out.extend(Import(a.name, node.lineno, local, guarded) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.append(Import(node.module, node.lineno, local, guarded))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            local = True
        if isinstance(node, (ast.Try, ast.TryStar)):
            catches = any(_catches_import_error(h) for h in node.handlers)
            for child in node.body:
                visit(child, local, guarded or catches)
            for child in [*node.handlers, *node.orelse, *node.finalbody]:
                visit(child, local, guarded)
            return
        for child in ast.iter_child_nodes(node):
            visit(child, local, guarded)

    visit(ast.parse(source, filename), False, False)
    return out


def group_of(path: Path) -> str:
    rel = path.relative_to(ROOT).parts
    if rel[0] == "tests":
        return "dev"
    if rel[:2] == ("backend", "train"):
        return "train"
    assert rel[0] in ("backend", "cli", "show", "tui"), path
    return "runtime"


def is_local_module(top: str, path: Path) -> bool:
    """A module beside the importing file, or the tests' own `support` package (pytest puts
    tests/ on the path)."""
    near = [path.parent, *([ROOT / "tests"] if path.is_relative_to(ROOT / "tests") else [])]
    return any((d / f"{top}.py").exists() or (d / top / "__init__.py").exists() for d in near)


def distributions(top: str, installed: dict[str, list[str]]) -> set[str]:
    found = {normalized(d) for d in installed.get(top, [])}
    if not found and top in NOT_INSTALLED:
        found = {normalized(NOT_INSTALLED[top])}
    return found


def problems(
    files: dict[Path, str],
    extras: dict[str, set[str]],
    installed: dict[str, list[str]],
    on_hosts: frozenset[Path] = frozenset(),
) -> tuple[list[str], set[str]]:
    """(what is wrong, third-party top-level names seen) for `files` (path -> source). Modules
    in `on_hosts` run on hosts, where nothing is installed: the host test judges those."""
    bad: list[str] = []
    seen: set[str] = set()
    anywhere = set().union(*extras.values())
    for path, src in files.items():
        if path in on_hosts:
            continue
        group = group_of(path)
        rel = path.relative_to(ROOT)
        for imp in imports_of(src, str(path)):
            top = imp.top
            if (
                top in sys.stdlib_module_names
                or top in ("__future__", "fleetdeck")
                or is_local_module(top, path)
            ):
                continue
            seen.add(top)
            dists = distributions(top, installed)
            where = f"{rel}:{imp.line} imports {imp.module}"
            if not dists:
                bad.append(
                    f"{where}: no installed distribution provides it (declare it, or map it in NOT_INSTALLED)"
                )
                continue
            if dists & set().union(*(extras.get(e, set()) for e in ALLOWED[group])):
                continue
            if (imp.local or imp.guarded) and dists & set().union(
                *(extras.get(e, set()) for e, base in ADDONS.items() if base in ALLOWED[group])
            ):
                continue
            if imp.guarded and dists & anywhere:
                continue
            bad.append(
                f"{where} ({', '.join(sorted(dists))}), which the {group} requirements "
                f"({' + '.join(sorted(ALLOWED[group]))}) do not declare"
            )
    return bad, seen


def scanned_files() -> dict[Path, str]:
    paths = [
        p
        for d in ("backend", "cli", "show", "tui", "tests")
        for p in sorted((ROOT / d).rglob("*.py"))
    ]
    return {p: p.read_text(encoding="utf-8") for p in paths}


def helper_entry_points() -> set[str]:
    """Every helper the controller sends to a host: the module-level string constants naming a
    `fleetdeck.backend` module (`HELPER`, `REMOTE`, `PROBE_MODULE`, ...), plus every module of
    the host wing (`backend/host/`) and the `main` of each of its packages (a helper the controller
    names by its module's `__name__`). The trainer (`fleetdeck.backend.train`) is not sent: it runs
    from the package installed on the host, with its `train` extra."""
    wing = ROOT / "backend" / "host"
    names = {f"fleetdeck.backend.host.{p.stem}" for p in wing.glob("*.py") if p.stem != "__init__"}
    names |= {f"fleetdeck.backend.host.{p.parent.name}.main" for p in wing.glob("*/main.py")}
    for path in (ROOT / "backend").rglob("*.py"):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
            ):
                v = node.value.value
                if re.fullmatch(r"fleetdeck\.backend(\.\w+)+", v) and not v.startswith(
                    "fleetdeck.backend.train"
                ):
                    names.add(v)
    return names


def host_modules() -> dict[str, Path]:
    """Module name -> file of everything that runs on a host: each helper's payload as
    `bundle.modules_for` builds it, and the whole host library."""
    mods = {
        name
        for entry in helper_entry_points()
        for name, _, _ in modules_for(entry)
        if name.startswith("fleetdeck.")
    }
    wing = ROOT / "backend" / "host"
    mods |= {
        "fleetdeck.backend.host." + ".".join(p.relative_to(wing).with_suffix("").parts)
        for p in wing.rglob("*.py")
        if p.stem != "__init__"
    }
    out = {}
    for name in mods:
        parts = name.split(".")[2:]
        path = ROOT / "backend" / Path(*parts).with_suffix(".py")
        out[name] = path if path.exists() else ROOT / "backend" / Path(*parts) / "__init__.py"
    return out


@pytest.fixture(scope="module")
def extras() -> dict[str, set[str]]:
    return declared(tomllib.loads(PYPROJECT.read_text()))


@pytest.fixture(scope="module")
def installed() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def test_every_third_party_import_is_declared_in_its_extra(extras, installed):
    bad, seen = problems(scanned_files(), extras, installed, frozenset(host_modules().values()))
    assert not bad, "\n".join(bad)
    # the scan saw what it is meant to see (a walker that finds nothing passes everything)
    assert {
        "asyncssh",
        "textual",
        "rich",
        "prometheus_client",
        "torch",
        "pytest",
        "flash_attn",
    } <= seen, seen


def test_an_undeclared_import_fails_and_each_kind_of_import_is_judged_by_its_extra(installed):
    """The checker itself, on made-up modules: what main held before `prometheus-client` was
    declared fails, and guarded / function-local / top-level imports are told apart."""
    extras = {
        "runtime": {"textual"},
        "train": {"torch"},
        "fa4": {"flash-attn-4"},
        "dev": {"pytest"},
    }
    files = {
        ROOT
        / "backend"
        / "made_up.py": "from prometheus_client import start_http_server\nimport textual\n",
        ROOT / "tui" / "made_up.py": "import torch\n",
        ROOT / "backend" / "train" / "made_up.py": (
            "import torch\nimport flash_attn\n"
            "def f():\n    from flash_attn.cute import interface\n"
            "try:\n    import pytest\nexcept ImportError:\n    pytest = None\n"
        ),
        ROOT / "tests" / "made_up.py": "import torch\nimport pytest\n",
    }
    bad, _ = problems(files, extras, installed)
    assert [b.split(" (")[0] for b in bad] == [
        "backend/made_up.py:1 imports prometheus_client",
        "tui/made_up.py:1 imports torch",
        "backend/train/made_up.py:2 imports flash_attn",  # an add-on at the top of a module
    ], bad


def test_what_runs_on_a_host_imports_only_the_standard_library_and_what_its_payload_carries():
    host = host_modules()
    for must in (
        "fleetdeck.backend.host.probe.main",
        "fleetdeck.backend.host.lib.serve",
        "fleetdeck.backend.host.launch.runfiles",
        "fleetdeck.backend.host.launch.supervise",
        "fleetdeck.backend.host.purge.main",
        "fleetdeck.backend.host.probe.seats",
    ):
        assert must in host, sorted(host)
    assert not any(
        n.startswith("fleetdeck.backend.train") or n.startswith("fleetdeck.tui") for n in host
    )
    bad = []
    for path in sorted(host.values()):
        for imp in imports_of(path.read_text(encoding="utf-8"), str(path)):
            top = imp.top
            if top in sys.stdlib_module_names or top == "__future__" or imp.module in CARRIED:
                continue
            if top == "fleetdeck" and any(
                h == imp.module or h.startswith(imp.module + ".") for h in host
            ):
                continue
            if top in HOST_OPTIONAL and imp.local:
                continue
            bad.append(f"{path.relative_to(ROOT)}:{imp.line} imports {imp.module}")
    assert not bad, (
        "what runs on a host imports more than the standard library and its payload:\n"
        + "\n".join(bad)
    )


def test_the_carried_modules_come_from_the_runtime_requirements(extras, installed):
    # the controller reads each carried module's source to bundle it, so a plain install has it
    for mod in CARRIED:
        assert distributions(mod, installed) & extras["runtime"], (mod, extras["runtime"])


def test_every_helper_payload_is_made_of_the_host_wing_alone():
    """What a host runs lives in one package, `backend/host/`: a helper whose payload reached
    into the controller (config, ssh, models) would ship it, and its imports, to every host."""
    outside = {}
    for entry in helper_entry_points():
        for name, _, _ in modules_for(entry):
            if (
                name in ("fleetdeck", "fleetdeck.backend", "fleetdeck.backend.host")
                or name.startswith("fleetdeck.backend.host.")
                or name in CARRIED
                or name.split(".")[0] in CARRIED
            ):
                continue
            outside.setdefault(entry, []).append(name)
    assert not outside, outside
    assert helper_entry_points() >= {
        "fleetdeck.backend.host.probe.main",
        "fleetdeck.backend.host.purge.main",
    }
