"""Helper payloads: the host library plus one action module, as one Python source.

Hosts get nothing installed, so what runs there travels on stdin through `ssh.BOOT`. A
payload registers every module it carries in `sys.modules` under its real name (the
`fleetdeck.backend.hostlib.*` modules, the action's own dependencies, and `pynvml` for the
probe), then runs the action module as `__main__`. The controller, the trainer and the tests
import the very same modules, so no rule exists in two places.

    python -m fleetdeck.backend.bundle fleetdeck.backend.actions.purge_remote > purge.py

writes a helper out as one file, for running by hand on a host (`python3 purge.py < req.json`).
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import sys

PREFIX = "fleetdeck."
# Third-party modules a helper may carry: pure Python, stdlib-only themselves.
CARRIED = ("pynvml",)

_LOADER = '''\
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
'''


def _source(name: str) -> tuple[str, bool]:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        raise ImportError(f"{name} has no Python source to carry")
    with open(spec.origin, encoding="utf-8") as f:
        return f.read(), spec.submodule_search_locations is not None


def _imports(name: str, src: str) -> list[str]:
    """fleetdeck modules and carried third-party modules that `src` imports (any depth)."""
    out: list[str] = []
    pkg = name.rpartition(".")[0]
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = pkg.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            out.append(base)
            out += [f"{base}.{a.name}" for a in node.names]
    keep = []
    for m in out:
        if not (m.startswith(PREFIX) or m in CARRIED):
            continue
        try:
            spec = importlib.util.find_spec(m)
        except (ImportError, ValueError):
            continue  # `from module import function`: the module itself is listed already
        if spec is not None and spec.origin and spec.origin.endswith(".py"):
            keep.append(m)
    return keep


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
        for dep in _imports(name, src):
            if dep != name:
                visit(dep)
        if pkg and name.startswith(PREFIX):
            return
        order.append((name, src, pkg))

    visit(main)
    return tuple(order)


@functools.cache
def bundle(main: str) -> str:
    """The one-file source of helper `main` (a module name such as
    `fleetdeck.backend.actions.purge_remote`): cached, built once per controller process."""
    parts = [f"# fleetdeck helper payload: {main} (generated; edit the modules, not this file)",
             _LOADER]
    mods = modules_for(main)
    for name, src, pkg in mods[:-1]:
        parts.append(f"_fleetdeck_register({name!r}, {src!r}, {pkg!r})")
    name, src, _ = mods[-1]
    parts.append(f"_fleetdeck_register({name!r}, None, False)")
    parts.append("del _fleetdeck_register, _s, _t")
    # the action runs as __main__, compiled on its own so its `from __future__` line is first
    parts.append("exec(compile({!r}, {!r}, 'exec'), globals())".format(src, f"<fleetdeck-helper:{name}>"))
    return "\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write the payload of the named helper module to stdout."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m fleetdeck.backend.bundle MODULE > helper.py", file=sys.stderr)
        return 2
    sys.stdout.write(bundle(args[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
