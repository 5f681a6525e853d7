"""Helper payloads: the host library plus one action module, as one Python source.

Hosts get nothing installed, so what runs there travels on stdin through `boot.BOOT`. A
payload registers every module it carries in `sys.modules` under its real name (the
`fleetdeck.backend.host.lib.*` modules, the action's own dependencies, and `pynvml` for the
probe), then runs the action module as `__main__`. The controller, the trainer and the tests
import the very same modules, so no rule exists in two places.

    python -m fleetdeck.backend.fleet.link.bundle fleetdeck.backend.host.purge.main > purge.py

writes a helper out as one file, for running by hand on a host (`python3 purge.py < req.json`).

Over SSH a helper travels as its `payload` instead: the same modules as data (JSON), named by
its sha256 and sent compressed, which the host's loader (`host/lib/payload`) keeps in a cache
with its bytecode, so a later connection sends only that name (docs/probe.md).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import json
import re
import sys
import zlib
from dataclasses import dataclass
from typing import Any

PREFIX = "fleetdeck."
# Third-party modules a helper may carry: pure Python, stdlib-only themselves.
CARRIED = ("pynvml",)

_LOADER = """\
import sys as _s, types as _t
def _fleetdeck_register(name, src, pkg):
    parent, _, child = name.rpartition(".")
    for i in range(1, name.count(".") + 1):
        p = ".".join(name.split(".")[:i])
        if p not in _s.modules:
            m = _t.ModuleType(p)
            m.__path__ = []
            _s.modules[p] = m
    if src is None:
        return
    m = _t.ModuleType(name)
    m.__file__ = "<fleetdeck-helper:%s>" % name
    if pkg:
        m.__path__ = []
    _s.modules[name] = m
    exec(compile(src, m.__file__, "exec"), m.__dict__)
    if parent:
        setattr(_s.modules[parent], child, m)
"""


def _source(name: str) -> tuple[str, bool]:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        raise ImportError(f"{name} has no Python source to carry")
    with open(spec.origin, encoding="utf-8") as f:
        return f.read(), spec.submodule_search_locations is not None


_IMPORT_LINE = re.compile(r"^[ \t]*(?:import|from)[ \t]", re.M)
_TYPE_CHECKING = re.compile(r"^([ \t]*)if TYPE_CHECKING:[ \t]*(?:#.*)?$", re.M)


def _type_only(lines: list[str], src: str) -> set[int]:
    """The numbers of the lines inside an `if TYPE_CHECKING:` block: imports a type checker
    reads and a host never runs (`TYPE_CHECKING = False` there), so no payload carries them
    (the probe's record declarations import `typing`, which costs a host 8 ms a start)."""
    out: set[int] = set()
    for m in _TYPE_CHECKING.finditer(src):
        depth = len(m.group(1).expandtabs())
        i = src.count("\n", 0, m.start()) + 1
        while i < len(lines):
            line = lines[i]
            if line.strip() and len(line) - len(line.lstrip()) <= depth:
                break
            out.add(i)
            i += 1
    return out


def _import_statements(src: str) -> list[ast.Import | ast.ImportFrom]:
    """The import statements a module runs, at any depth but under `if TYPE_CHECKING:`
    (`_type_only`), in source order, without parsing the whole module (that took most of the
    time of building the probe's payload at every start of the CLI): each line that starts like one is parsed with its continuation lines (an open
    parenthesis or a backslash); a line of a docstring that merely looks like one does not
    parse as a whole statement, or names no module a helper carries."""
    out: list[ast.Import | ast.ImportFrom] = []
    lines = src.splitlines()
    starts = {src.count("\n", 0, m.start()) for m in _IMPORT_LINE.finditer(src)}
    for i in sorted(starts - _type_only(lines, src)):
        text = lines[i].split("#", 1)[0].strip()  # an import statement holds no string
        j = i
        while (text.count("(") > text.count(")") or text.endswith("\\")) and j + 1 < len(lines):
            j += 1
            text = text.rstrip("\\") + " " + lines[j].split("#", 1)[0].strip()
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        out += [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    return out


@functools.cache
def _spec(name: str) -> Any:
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None


def _is_module(name: str) -> bool:
    """True when `name` is a module with Python source, found without running it: a name
    whose parent is a module, not a package, is something that module defines."""
    parent = name.rpartition(".")[0]
    if parent:
        p = _spec(parent)
        if p is None or p.submodule_search_locations is None:
            return False
    spec = _spec(name)
    return bool(spec is not None and spec.origin and spec.origin.endswith(".py"))


def _imports(name: str, src: str) -> list[str]:
    """fleetdeck modules and carried third-party modules that `src` imports (any depth)."""
    out: list[str] = []
    pkg = name.rpartition(".")[0]
    for node in _import_statements(src):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        else:
            base = node.module or ""
            if node.level:
                parts = pkg.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            out.append(base)
            out += [f"{base}.{a.name}" for a in node.names]
    # `from module import function`: the function is no module; the module is listed already
    return [m for m in out if (m.startswith(PREFIX) or m in CARRIED) and _is_module(m)]


@functools.cache
def modules_for(main: str) -> tuple[tuple[str, str, bool], ...]:
    """(name, source, is_package) of every module `main` needs, dependencies first, `main`
    last. Package `__init__` files are registered empty (they may import the controller)."""
    order: list[tuple[str, str, bool]] = []
    seen: set[str] = set()

    def visit(name: str) -> None:
        if name in seen:
            return
        seen.add(name)
        src, pkg = _source(name)
        # a carried third-party module imports only the standard library (see CARRIED): its
        # source (pynvml's is 330 KB) is not parsed for imports
        for dep in () if name in CARRIED else _imports(name, src):
            if dep != name:
                visit(dep)
        if pkg and name.startswith(PREFIX):
            return
        order.append((name, src, pkg))

    visit(main)
    return tuple(order)


def _not_a_package(main: str) -> None:
    if _source(main)[1]:
        raise ImportError(f"{main} is a package: name its helper module ({main}.main)")


@functools.cache
def bundle(main: str) -> str:
    """The one-file source of helper `main` (a module name such as
    `fleetdeck.backend.host.purge.main`; the controller takes it from the module object's
    `__name__`): cached, built once per controller process."""
    _not_a_package(main)
    parts = [
        f"# fleetdeck helper payload: {main} (generated; edit the modules, not this file)",
        _LOADER,
    ]
    mods = modules_for(main)
    for name, src, pkg in mods[:-1]:
        parts.append(f"_fleetdeck_register({name!r}, {src!r}, {pkg!r})")
    name, src, _ = mods[-1]
    parts.append(f"_fleetdeck_register({name!r}, None, False)")
    parts.append("del _fleetdeck_register, _s, _t")
    # the action runs as __main__, compiled on its own so its `from __future__` line is first
    parts.append(
        "exec(compile({!r}, {!r}, 'exec'), globals())".format(src, f"<fleetdeck-helper:{name}>")
    )
    text = "\n".join(parts) + "\n"
    _MAINS[text] = main
    return text


# bundle text -> its main module, so a caller holding the text gets the same payload
_MAINS: dict[str, str] = {}


@dataclass(frozen=True)
class Payload:
    """A helper as the host's loader takes it (`host/lib/payload`): `data` is UTF-8 JSON
    `{"format": 1, "main": NAME, "modules": [[NAME, IS_PACKAGE, SOURCE], ...]}`, named by
    `sha256`; `packed` is what travels (zlib)."""

    main: str
    sha256: str
    data: bytes

    @functools.cached_property
    def packed(self) -> bytes:
        """`data` compressed (the probe's 0.47 MB become 0.09 MB, in 10 ms; level 9 took
        three times as long for 1% less)."""
        return zlib.compress(self.data, 6)


@functools.cache
def payload(main: str) -> Payload:
    """The payload of helper `main` (a module name), built once per controller process."""
    _not_a_package(main)
    doc = {
        "format": 1,
        "main": main,
        "modules": [[name, pkg, src] for name, src, pkg in modules_for(main)],
    }
    data = json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return Payload(main, hashlib.sha256(data).hexdigest(), data)


def payload_for(source: str) -> Payload | None:
    """The payload of a helper given as a module name or as its `bundle` text; None for other
    source text (sent as it is)."""
    if "\n" not in source and source.startswith(PREFIX):
        return payload(source)
    main = _MAINS.get(source)
    return payload(main) if main is not None else None


def main(argv: list[str] | None = None) -> int:
    """Write the payload of the named helper module to stdout."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(
            "usage: python -m fleetdeck.backend.fleet.link.bundle MODULE > helper.py",
            file=sys.stderr,
        )
        return 2
    try:
        sys.stdout.write(bundle(args[0]))
    except ImportError as e:
        print(f"bundle: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
