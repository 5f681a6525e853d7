"""Every helper, bundled with the host library, runs on a real sshd host under the oldest
Python hosts may have (3.8, from pyenv where it is installed) and under this one.

A helper answers a request it does not know with the one error shape, which proves that the
whole payload (every module it carries) loaded and that its dispatch is the shared one.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from fleetdeck.backend.fleet.config import load_fleet
from fleetdeck.backend.fleet.link import ssh
from fleetdeck.backend.fleet.link.bundle import bundle, modules_for, payload
from fleetdeck.backend.fleet.link.ssh import HostLink

ROOT = Path(__file__).resolve().parents[2]
HELPERS = [
    "fleetdeck.backend.host.probe.main",
    "fleetdeck.backend.host.purge.main",
    "fleetdeck.backend.host.mirror.main",
    "fleetdeck.backend.host.schedules.main",
    "fleetdeck.backend.host.seat_check.main",
    "fleetdeck.backend.host.launch.main",
]
# every other helper: each module of the host wing that answers requests (`serve(...)`)
HELPERS += [
    f"fleetdeck.backend.host.{p.stem}"
    for p in sorted((ROOT / "backend" / "host").glob("*.py"))
    if "serve(" in p.read_text(encoding="utf-8")
    and f"fleetdeck.backend.host.{p.stem}" not in HELPERS
]


def python38() -> str | None:
    for cand in sorted(Path("/root/.pyenv/versions").glob("3.8*/bin/python")) + [
        Path("/usr/bin/python3.8")
    ]:
        if (
            cand.exists()
            and subprocess.run(
                [str(cand), "-c", "import sys; assert sys.version_info[:2] == (3, 8)"],
                capture_output=True,
            ).returncode
            == 0
        ):
            return str(cand)
    return None


PYTHONS = [
    pytest.param(sys.executable, id="this-python"),
    pytest.param(
        python38(),
        id="python3.8",
        marks=pytest.mark.skipif(
            python38() is None,
            reason="no Python 3.8 on this machine "
            "(pyenv install 3.8) to stand in for the oldest host",
        ),
    ),
]


def test_the_host_library_imports_only_the_standard_library_and_itself():
    paths = sorted((ROOT / "backend" / "host" / "lib").glob("*.py"))
    assert len(paths) > 10, paths
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else (
                    [node.module or ""]
                    if isinstance(node, ast.ImportFrom) and not node.level
                    else []
                )
            )
            for n in names:
                top = n.split(".")[0]
                assert (
                    top in sys.stdlib_module_names
                    or n.startswith("fleetdeck.backend.host.lib")
                    or top == "__future__"
                ), f"{path.name} imports {n}"


@pytest.mark.parametrize("helper", HELPERS)
def test_each_payload_carries_the_host_library_it_uses(helper):
    carried = [m[0] for m in modules_for(helper)]
    assert carried[-1] == helper
    src = bundle(helper)
    for name in carried[:-1]:
        assert f"_fleetdeck_register({name!r}" in src
    if helper == "fleetdeck.backend.host.probe.main":
        assert "pynvml" in carried


@pytest.mark.parametrize("helper", HELPERS)
def test_the_import_scan_finds_what_a_full_parse_finds(helper):
    """The bundle reads import statements line by line (a full parse of every module cost the
    CLI most of the payload's build at each start); it must find every one a parse finds but
    those under `if TYPE_CHECKING:`, which a host never runs."""
    from fleetdeck.backend.fleet.link.bundle import _import_statements

    for name, src, _pkg in modules_for(helper):
        tree = ast.parse(src)
        typed = {
            id(n)
            for block in ast.walk(tree)
            if isinstance(block, ast.If) and ast.unparse(block.test) == "TYPE_CHECKING"
            for stmt in block.body
            for n in ast.walk(stmt)
        }
        full = [
            ast.dump(n)
            for n in ast.walk(tree)
            if isinstance(n, (ast.Import, ast.ImportFrom)) and id(n) not in typed
        ]
        assert sorted(ast.dump(n) for n in _import_statements(src)) == sorted(full), name


def test_an_import_for_the_type_checker_only_is_not_carried(tmp_path):
    """The probe's modules import their record declarations (`probe/wire.py`, which imports
    `typing`) under `if TYPE_CHECKING:` only: the probe's payload does not carry them, and
    running it loads no `typing` (8 ms a start on a host)."""
    from fleetdeck.backend.fleet.link.bundle import _import_statements

    src = "import os\nif TYPE_CHECKING:  # types\n    import typing\n\n    from a import b\nimport json\n"
    assert [ast.unparse(n) for n in _import_statements(src)] == ["import os", "import json"]
    probe = "fleetdeck.backend.host.probe.main"
    assert "fleetdeck.backend.host.probe.wire" not in [m[0] for m in modules_for(probe)]
    (tmp_path / "probe.py").write_text(bundle(probe))
    p = subprocess.run(
        [sys.executable, "-X", "importtime", str(tmp_path / "probe.py"), '{"op": "ping"}'],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert json.loads(p.stdout) == {"ok": True}
    assert [ln for ln in p.stderr.splitlines() if ln.endswith("| typing")] == []


@pytest.mark.sshd
@pytest.mark.parametrize("python", PYTHONS)
async def test_every_helper_runs_bundled_on_a_real_host(sshd_fleet, tmp_path, python):
    path = sshd_fleet.write_fleet(
        tmp_path / "hosts.toml", names=["h1"], defaults={"python": python}
    )
    async with HostLink(load_fleet(str(path)).host("h1")) as link:
        for helper in HELPERS:
            ans = await link.run_helper(helper, {"op": "no-such-op"})
            err = ans.get("error") if isinstance(ans, dict) else None
            assert ans["ok"] is False and isinstance(err, dict) and err["code"] == "bad-request", (
                helper,
                ans,
            )
        ver = await link.run([python, "-c", "import sys; print(sys.version_info[:2])"])
    expect = "(3, 8)" if python != sys.executable else str(sys.version_info[:2])
    assert ver.stdout.decode().strip() == expect


@pytest.mark.sshd
@pytest.mark.parametrize("python", PYTHONS)
async def test_every_helper_runs_from_the_host_payload_cache(
    spare_fleet, tmp_path, python, monkeypatch
):
    """Under each Python: the first run of a helper sends it whole and the host keeps it with
    bytecode for that Python; the second sends its name only, and runs the kept one."""
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    spare_fleet.add("c1", sshd_extra=(f"SetEnv XDG_CACHE_HOME={cache}",))
    path = spare_fleet.write_fleet(
        tmp_path / "hosts.toml", defaults={"python": python, "command_timeout": 90}
    )
    frames: list[bool] = []
    real = ssh.payload_stdin

    def record(p, cached, keep=True):
        frames.append(cached)
        return real(p, cached, keep)

    monkeypatch.setattr(ssh, "payload_stdin", record)
    async with HostLink(load_fleet(str(path)).host("c1")) as link:
        for helper in HELPERS:
            for _ in range(2):
                ans = await link.run_helper(helper, {"op": "no-such-op"})
                assert isinstance(ans, dict) and ans["ok"] is False, (helper, ans)
        tag = (
            (
                await link.run(
                    [
                        python,
                        "-c",
                        "import sys; print('%s-%x' % (sys.implementation.cache_tag, "
                        "sys.hexversion))",
                    ]
                )
            )
            .stdout.decode()
            .strip()
        )
    assert frames == [True, False, True] * len(HELPERS)
    kept = cache / "fleetdeck" / "payload"
    assert sorted(p.name for p in kept.glob("*.code")) == sorted(
        f"{payload(h).sha256}.{tag}.code" for h in HELPERS
    )


def test_a_helper_writes_out_as_one_file_that_runs_alone(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "fleetdeck.backend.fleet.link.bundle",
            "fleetdeck.backend.host.probe.main",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (tmp_path / "probe.py").write_text(out)
    # run where fleetdeck is not importable: only the file itself
    p = subprocess.run(
        [sys.executable, "-I", str(tmp_path / "probe.py")],
        input=json.dumps({"op": "ping"}),
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["ok"] is True
