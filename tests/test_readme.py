"""The README's promises that a script can hold it to: CI runs its test command, its links lead
somewhere, and every test it names as proof exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_ci_runs_the_readmes_test_command_verbatim():
    block = README.split("```sh\n", 1)[1].split("```", 1)[0].splitlines()
    test_cmd = block[1].split("   #", 1)[0].strip()
    ci_lines = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert test_cmd in ci_lines
    assert "apt-get install" in test_cmd and test_cmd.endswith("python -m pytest")


def test_every_link_leads_to_a_file():
    for target in re.findall(r"\]\(([^)#]+)\)", README):
        if "://" not in target:
            assert (ROOT / target).exists(), target


def test_every_test_named_as_proof_exists():
    named = re.findall(r"`(test_[a-z0-9_]+\.py)(?:::(test_[a-z0-9_]+))?`", README)
    named += [(None, fn) for fn in re.findall(r"`::(test_[a-z0-9_]+)`", README)]
    assert len(named) >= 10
    sources = {p.name: p.read_text() for p in (ROOT / "tests").glob("test_*.py")}
    everything = "\n".join(sources.values())
    for file, fn in named:
        if file:
            assert file in sources, file
        if fn:
            assert f"def {fn}(" in (sources[file] if file else everything), (file, fn)
