"""Answers from a host that are not what they should be, each named by its cause: nested too deep
(`answer-too-deep`, refused before parsing), malformed (`bad-answer`), and a `become = "sudo"`
host that has no sudo (`sudo-missing`). Real loopback sshd hosts throughout."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from fleetdeck.backend.fleet.config import load_fleet
from fleetdeck.backend.fleet.errors import HostError
from fleetdeck.backend.fleet.link.ssh import HostLink
from fleetdeck.backend.fleet.poller import Poller
from fleetdeck.backend.host.lib import jsondepth

DEEP = 100_000


# -- the measure ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text,depth",
    [
        ("{}", 1),
        ("[[1], [[2]]]", 3),
        ('{"a": "[[[[{{{{"}', 1),
        ('["\\"[[[[", ["]]"]]', 2),
        ('{"k": "unterminated [[[[[[', 1),
        ('[[[["x\\', 4),
        ('{"é": ["日本", {"ü": []}]}', 4),
        ("7", 0),
    ],
)
def test_nesting_is_counted_outside_strings_without_recursion(text, depth):
    assert jsondepth.depth(text) == depth
    assert jsondepth.depth(text.encode()) == depth


def _nesting(doc):
    if isinstance(doc, dict):
        return 1 + max(map(_nesting, doc.values()), default=0)
    if isinstance(doc, list):
        return 1 + max(map(_nesting, doc), default=0)
    return 0


def test_the_measure_is_the_parsed_documents_nesting_whatever_its_strings_hold():
    """Strings full of brackets, quotes and backslashes (escaped as JSON escapes them, runs of
    backslashes before a quote included) never move the measure off the parsed document's own
    nesting, for 500 random documents."""
    rng = random.Random(4919)
    alphabet = ["[", "]", "{", "}", '"', "\\", "\\\\", '\\"', "x", " ", "é"]

    def text():
        return "".join(rng.choice(alphabet) for _ in range(rng.randrange(12)))

    def doc(level):
        if level > 6 or rng.random() < 0.3:
            return text() if rng.random() < 0.7 else rng.randrange(9)
        if rng.random() < 0.5:
            return [doc(level + 1) for _ in range(rng.randrange(4))]
        return {text(): doc(level + 1) for _ in range(rng.randrange(4))}

    for _ in range(500):
        d = doc(0)
        for dumped in (json.dumps(d), json.dumps(d, ensure_ascii=False)):
            assert jsondepth.depth(dumped) == _nesting(d), dumped
            assert jsondepth.depth(dumped.encode()) == _nesting(d), dumped


def test_past_the_limit_is_refused_before_parsing_and_at_it_parses():
    at = "[" * jsondepth.MAX_DEPTH + "]" * jsondepth.MAX_DEPTH
    assert jsondepth.loads(at) is not None
    for deep in (
        "[" * (jsondepth.MAX_DEPTH + 1) + "]" * (jsondepth.MAX_DEPTH + 1),
        '{"a":' * DEEP + "1" + "}" * DEEP,
        "[" * DEEP,
    ):  # not even valid JSON: refused for its depth first, never parsed
        with pytest.raises(jsondepth.TooDeep) as e:
            jsondepth.loads(deep)
        assert e.value.code == "answer-too-deep" and "refused before parsing" in str(e.value)
    # many brackets inside strings are not nesting
    flat = json.dumps({"cmd": "[" * 10_000, "more": ["{" * 500] * 3})
    assert jsondepth.loads(flat)["more"][0] == "{" * 500


# -- host answers --------------------------------------------------------------------------------
DEEP_LINE = f"'{{\"gpus\": ' + '[' * {DEEP} + ']' * {DEEP} + '}}'"
DEEP_PROBE = (
    "import sys\n"
    "while sys.stdin.buffer.readline():\n"
    f"    sys.stdout.write({DEEP_LINE} + '\\n')\n"
    "    sys.stdout.flush()\n"
)
LIST_PROBE = (
    "import sys\n"
    "while sys.stdin.buffer.readline():\n"
    "    sys.stdout.write('[1, 2, 3]\\n')\n"
    "    sys.stdout.flush()\n"
)


@pytest.fixture
def one_host(spare_fleet, tmp_path):
    spare_fleet.add("odd")
    return load_fleet(str(spare_fleet.write_fleet(tmp_path / "hosts.toml")))


@pytest.mark.sshd
async def test_an_over_nested_probe_answer_is_answer_too_deep_not_a_lost_connection(one_host):
    # before: "connection lost: maximum recursion depth exceeded while decoding a JSON array"
    async with Poller(one_host, probe=DEEP_PROBE) as poller:
        snap = (await poller.poll()).hosts[0]
    assert not snap.reachable and snap.error_code == "answer-too-deep", (
        snap.error_code,
        snap.error,
    )
    assert snap.error.startswith(
        "the probe's answer nests 100001 levels of arrays and objects, more than the 64"
    )
    assert "recursion" not in snap.error and "connection lost" not in snap.error


@pytest.mark.sshd
async def test_an_over_nested_or_malformed_helper_answer_is_named(one_host):
    deep = f"import sys\nsys.stdin.read()\nsys.stdout.write({DEEP_LINE})\n"
    async with HostLink(one_host.host("odd")) as link:
        with pytest.raises(HostError) as e:
            await link.run_helper(deep, {}, what="lister")
        assert (
            e.value.code == "answer-too-deep"
            and "the lister's answer nests 100001 levels" in e.value.message
        )
        with pytest.raises(HostError) as e:
            await link.call("import sys\nsys.stdin.read()\nsys.stdout.write('[1, 2]')\n", "list")
        assert e.value.code == "bad-answer", (e.value.code, e.value.message)
        assert "malformed (a list, not an answer object with ok)" in e.value.message


@pytest.mark.sshd
async def test_a_probe_answer_that_is_not_an_object_is_a_bad_answer(one_host):
    async with Poller(one_host, probe=LIST_PROBE) as poller:
        snap = (await poller.poll()).hosts[0]
    assert not snap.reachable and snap.error_code == "bad-answer", (snap.error_code, snap.error)
    assert snap.error == "the probe answered a list, not a JSON object: [1, 2, 3]"


NAN_PROBE = (
    "import sys\n"
    "while sys.stdin.buffer.readline():\n"
    '    sys.stdout.write(\'{"gpus": [{"index": 0, "temperature_c": NaN}], "load1": 0.1}\\n\')\n'
    "    sys.stdout.flush()\n"
)


@pytest.mark.sshd
async def test_one_nan_in_a_probe_answer_is_a_bad_answer_naming_the_field(one_host):
    # before: "the login shell printed text" (shell-output), and the probe was dropped
    async with Poller(one_host, probe=NAN_PROBE) as poller:
        snap = (await poller.poll()).hosts[0]
        again = (await poller.poll()).hosts[0]
    assert not snap.reachable and snap.error_code == "bad-answer", (snap.error_code, snap.error)
    assert (
        snap.error == "the probe's answer holds NaN at gpus[0].temperature_c, which is not a number"
    )
    assert again.error_code == "bad-answer" and "shell" not in again.error


# -- become = "sudo" on a host without sudo ------------------------------------------------------
def _path_without_sudo(where: Path) -> Path:
    """A folder of links to every program on this machine's PATH but sudo: a host that has no
    sudo installed, as its login shell sees it."""
    where.mkdir()
    for d in ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"):
        try:
            names = os.listdir(d)
        except OSError:
            continue
        for name in names:
            if (
                name not in ("sudo", "sudoedit")
                and not (where / name).exists()
                and not (where / name).is_symlink()
            ):
                (where / name).symlink_to(os.path.join(d, name))
    return where


@pytest.mark.sshd
async def test_become_sudo_on_a_host_without_sudo_says_sudo_is_missing(spare_fleet, tmp_path):
    # before: the probe failed with "Channel not open for sending"
    bindir = _path_without_sudo(tmp_path / "bin-without-sudo")
    spare_fleet.add("nosudo", sshd_extra=(f"SetEnv PATH={bindir}",))
    path = spare_fleet.write_fleet(tmp_path / "hosts.toml", per_host={"nosudo": {"become": "sudo"}})
    fleet = load_fleet(str(path))
    async with Poller(fleet) as poller:
        snap = (await poller.poll()).hosts[0]
        assert not snap.reachable and snap.error_code == "sudo-missing", (
            snap.error_code,
            snap.error,
        )
        assert snap.error.startswith(
            "sudo is not installed on the host, or not on the login's PATH"
        )
        assert "sudo: " in snap.error and "not found" in snap.error  # the shell's own words
        assert "Channel not open" not in snap.error
        with pytest.raises(HostError) as e:
            await poller.link("nosudo").run_helper("import sys\nprint('{}')\n", {})
        assert e.value.code == "sudo-missing"
        # a plain command needs no sudo and still runs
        assert (await poller.link("nosudo").run(["echo", "ok"])).stdout == b"ok\n"
