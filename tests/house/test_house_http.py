"""House rule: the controller has one HTTP client. Every request the controller makes goes
through `backend/monitor/delivery/http_client.py` (proxies from the environment, TLS verified, redirects
by one policy, deadlines, bounded bodies); no other product module imports an HTTP client
library or opens a raw connection to speak HTTP itself, so the clients cannot drift apart
again (the Alertmanager one once dropped the query string and followed no redirects).

What runs on a host (`backend/host/`) is exempt: it may import only the standard library, and
its seat check asks a seat on that host's loopback.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ("backend", "cli", "show", "tui")
THE_CLIENT = "backend/monitor/delivery/http_client.py"
EXEMPT = ("backend/host/",)
#: modules that make HTTP requests (or raw connections to make them by hand)
CLIENTS = {"httpx", "httpx2", "httpcore", "httpcore2", "aiohttp", "requests", "urllib3"}
CLIENT_MODULES = {"urllib.request", "http.client"}
RAW = {("asyncio", "open_connection"), ("socket", "create_connection")}


def offences(source: str) -> list[tuple[int, str]]:
    """(line, what) for each HTTP client import or raw connection in `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for n in names:
            if n.split(".")[0] in CLIENTS or n in CLIENT_MODULES:
                found.append((node.lineno, f"imports {n}"))
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and (node.value.id, node.attr) in RAW
        ):
            found.append((node.lineno, f"{node.value.id}.{node.attr}"))
    return sorted(set(found))


def test_the_scan_sees_each_way_of_making_a_request():
    src = (
        "import httpx2\nimport urllib.request\nfrom http import client\nfrom http.client import"
        " HTTPConnection\nimport asyncio\nasyncio.open_connection('h', 80)\n"
    )
    assert [line for line, _ in offences(src)] == [1, 2, 3, 4, 6]
    assert offences("import urllib.parse\nimport http.server\nimport json\n") == []


def test_only_the_one_client_makes_http_requests():
    bad = []
    for top in PRODUCT:
        for p in sorted((REPO / top).rglob("*.py")):
            rel = p.relative_to(REPO).as_posix()
            if rel == THE_CLIENT or rel.startswith(EXEMPT):
                continue
            bad += [f"{rel}:{line}: {what}" for line, what in offences(p.read_text("utf-8"))]
    assert not bad, "use backend/monitor/http_client.request instead:\n" + "\n".join(bad)
    assert offences((REPO / THE_CLIENT).read_text("utf-8")), "the client itself is seen"
