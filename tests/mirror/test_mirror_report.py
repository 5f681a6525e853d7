"""Typed plan and report, rendered by the CLI: hostile and non-UTF-8 names survive exactly on
the destination's disk and are shown escaped (the host library's `shown`), never raw."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import uuid
from dataclasses import replace

import pytest

from fleetdeck.backend.actions.mirror.main import mirror
from fleetdeck.backend.actions.mirror.report import MirrorPlan, MirrorReport
from fleetdeck.backend.fleet.config import load_fleet
from fleetdeck.backend.fleet.link.ssh import HostLink
from fleetdeck.cli.main import main

pytestmark = pytest.mark.sshd

# bytes names: not UTF-8, a newline, a backslash-n spelled out, quotes, $(..), a leading dash
NAMES = [
    b"caf\xe9.bin",
    b"new\nline",
    b"back\\nslash",
    b'it\'s "q"',
    b"$(touch pwned)",
    b"-rf",
    b"\xff\xfe raw",
]


@pytest.fixture
def tree(sshd_fleet):
    tag = uuid.uuid4().hex[:8]
    src = sshd_fleet.hosts["h1"].root / f"rep-{tag}" / "adapter"
    (src / "sub dir" / "empty").mkdir(parents=True)
    for i, name in enumerate(NAMES):
        with open(os.path.join(os.fsencode(src / "sub dir"), name), "wb") as f:
            f.write(b"x" * (i + 1))
    (src / "adapter_model.safetensors").write_bytes(os.urandom(4096))
    dst = sshd_fleet.hosts["h2"].root / f"rep-{tag}" / "adapter"
    yield src, dst
    shutil.rmtree(src.parent, ignore_errors=True)
    shutil.rmtree(dst.parent, ignore_errors=True)


def test_plan_and_report_are_typed(fleet_file, tree):
    src, dst = tree
    fleet = load_fleet(str(fleet_file))

    async def go():
        a, b = HostLink(fleet.host("h1")), HostLink(fleet.host("h2"))
        try:
            return (
                await mirror(a, str(src), b, str(dst), dry_run=True),
                await mirror(a, str(src), b, str(dst)),
            )
        finally:
            await a.close()
            await b.close()

    dry, done = asyncio.run(go())
    assert isinstance(dry, MirrorReport) and isinstance(dry.plan, MirrorPlan)
    p = dry.plan
    assert p.bytes == 4096 + sum(range(1, len(NAMES) + 1))
    assert set(p.dirs) == {"sub dir", "sub dir/empty"} and not p.dst_exists
    assert {os.fsencode(f.path) for f in p.files} == {b"adapter_model.safetensors"} | {
        b"sub dir/" + n for n in NAMES
    }
    assert done.verified and done.plan is not None
    assert replace(done.plan, free_bytes=None) == replace(p, free_bytes=None)


def test_names_survive_exactly_and_display_escaped(fleet_file, tree, capsys):
    src, dst = tree
    s, d = f"h1:{src}", f"h2:{dst}"
    assert main(["mirror", "--hosts", str(fleet_file), s, d, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "dry run: would copy 8 files in 2 folders" in " ".join(out.split())
    assert not dst.exists()

    assert main(["mirror", "--hosts", str(fleet_file), s, d, "--json"]) == 0
    raw = capsys.readouterr().out
    doc = json.loads(raw)
    assert doc["verified"] and doc["plan"]["bytes"] == doc["bytes_src"]
    assert "\\udce9" in raw  # surrogateescape in JSON: the exact byte, recoverable
    assert {os.fsencode(f["path"]) for f in doc["files"]} >= {b"sub dir/" + n for n in NAMES}
    # on the destination's disk: the very same bytes, contents too
    got = set(os.listdir(os.fsencode(dst / "sub dir")))
    assert got == set(NAMES) | {b"empty"}
    for i, name in enumerate(NAMES):
        with open(os.path.join(os.fsencode(dst / "sub dir"), name), "rb") as f:
            assert f.read() == b"x" * (i + 1)
    assert not (src.parent / "pwned").exists()

    assert main(["verify", "--hosts", str(fleet_file), s, d]) == 0
    out = capsys.readouterr().out
    assert "caf\\xe9.bin" in out and "\\xff\\xfe raw" in out
    assert "new\\nline" in out and "back\\\\nslash" in out  # a real newline vs backslash-n
    assert "\udce9" not in out and "\n" + "line" not in out


def test_a_refusal_is_one_sentence_on_stderr(fleet_file, tree, capsys):
    src, dst = tree
    (dst.parent).mkdir(parents=True)
    dst.write_bytes(b"a file where the folder should go")
    assert main(["mirror", "--hosts", str(fleet_file), f"h1:{src}", f"h2:{dst}"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("fleetdeck: mirror refused:") and err.count("\n") == 1


def test_a_hostile_path_in_an_error_is_escaped_once(fleet_file, tree, capsys):
    src, dst = tree
    missing = f"{src}-gone\n$(x)\\n\udce9"
    assert main(["mirror", "--hosts", str(fleet_file), f"h1:{missing}", f"h2:{dst}"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "\udce9" not in err
    assert "-gone\\n$(x)\\\\n\\xe9 does not exist" in err
