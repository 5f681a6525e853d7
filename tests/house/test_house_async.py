"""House rule of every wing (docs/development.md): every await is bounded by `asyncio.timeout`,
never `asyncio.wait_for` (which in Python 3.11 can lose a cancellation that arrives as its
awaitable ends), and a local process is started by `backend/fleet/link/localproc.py`, never by
asyncio's `create_subprocess_exec` or `create_subprocess_shell` (cancelled while it connects
the child's pipes, it can wait for the child for ever, or leave it running unwatched).

The scan reads each module's syntax tree: `asyncio.wait_for(...)`, the same through an alias
(`import asyncio as aio`), and a name imported from asyncio (`from asyncio import wait_for`).
`threading.Condition.wait_for` and other `wait_for` methods are not asyncio's, and pass.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ("backend", "cli", "show", "tui")
#: asyncio's names that the rule forbids, with what to use instead
FORBIDDEN = {
    "wait_for": "asyncio.timeout",
    "create_subprocess_exec": "backend/fleet/link/localproc.spawn",
    "create_subprocess_shell": "backend/fleet/link/localproc.spawn",
}


def offences(source: str) -> list[tuple[int, str]]:
    """(line, forbidden name) for every use of asyncio's forbidden names in `source`."""
    tree = ast.parse(source)
    aliases = {"asyncio"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases |= {a.asname or a.name for a in node.names if a.name == "asyncio"}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "asyncio":
            found += [(node.lineno, a.name) for a in node.names if a.name in FORBIDDEN]
        elif (
            isinstance(node, ast.Attribute)
            and node.attr in FORBIDDEN
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
        ):
            found.append((node.lineno, node.attr))
    return sorted(found)


def product_files() -> list[Path]:
    return sorted(p for top in PRODUCT for p in (REPO / top).rglob("*.py"))


def test_no_wait_for_and_no_asyncio_subprocess_in_the_product():
    bad = [
        f"{p.relative_to(REPO)}:{line}: asyncio.{name} (use {FORBIDDEN[name]})"
        for p in product_files()
        for line, name in offences(p.read_text(encoding="utf-8"))
    ]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize(
    "source,found",
    [
        ("import asyncio\nasync def f(x):\n    await asyncio.wait_for(x, 1)\n", [(3, "wait_for")]),
        (
            "import asyncio as aio\nx = aio.create_subprocess_exec\n",
            [(2, "create_subprocess_exec")],
        ),
        ("from asyncio import wait_for, sleep\n", [(1, "wait_for")]),
        ("from asyncio.tasks import wait_for\n", [(1, "wait_for")]),
        (
            "import asyncio\nasync def f():\n    await asyncio.create_subprocess_shell('x')\n",
            [(3, "create_subprocess_shell")],
        ),
        # not asyncio's: a threading.Condition's, and a method of anything else
        ("import threading\nc = threading.Condition()\nc.wait_for(lambda: True, 1)\n", []),
        (
            "import asyncio\nasync def f(q):\n    async with asyncio.timeout(1):\n        await q\n",
            [],
        ),
    ],
)
def test_the_scan_finds_what_it_should_and_nothing_else(source, found):
    assert offences(source) == found
