"""The OpenAI-compatible seat server (seat_server.py), started on a free port."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

LISTENER = """#!/usr/bin/env python3
import os, socket, subprocess, sys, time
args = sys.argv[1:]
if os.environ.get("SPAWN_WORKER") and "--worker" not in args:
    subprocess.Popen([sys.executable, sys.argv[0], *args, "--worker"])
port = 0
if "--port" in args:
    port = int(args[args.index("--port") + 1])
elif os.environ.get("OLLAMA_HOST"):
    port = int(os.environ["OLLAMA_HOST"].rpartition(":")[2])
s = socket.socket()
s.bind(("127.0.0.1", 0 if "--worker" in args else port))
s.listen()
print(s.getsockname()[1], flush=True)
time.sleep(600)
"""


SERVER = Path(__file__).with_name("seat_server.py")


def start_server(*flags: str) -> tuple[subprocess.Popen, int]:
    pytest.importorskip("transformers")
    p = subprocess.Popen(
        [sys.executable, str(SERVER), "--port", "0", *flags],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    line = p.stdout.readline()
    if not line.startswith("listening on "):
        p.kill()
        raise RuntimeError(f"seat server did not start: {line!r}")
    return p, int(line.split()[-1])
