"""The README's promises that a script can hold it to: CI runs its test command, its links lead
somewhere, and every test it names as proof exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def readme_test_command() -> str:
    block = README.split("```sh\n", 1)[1].split("```", 1)[0].splitlines()
    return block[1].split("   #", 1)[0].strip()


def ci_lines() -> list[str]:
    return [ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines()]


def test_ci_runs_the_readmes_test_command_verbatim():
    test_cmd = readme_test_command()
    assert test_cmd in ci_lines()
    assert "apt-get install" in test_cmd and test_cmd.endswith("python -m pytest")
    # the local CPU wheel first: a plain `torch` requirement would pull a multi-GB CUDA build
    pips = re.findall(r"pip install [^&]+", test_cmd)
    assert pips[0].strip() == "pip install torch==2.13.0", pips


def test_ci_runs_it_in_a_new_virtual_environment_of_its_own():
    """`.ci/run` makes a new venv inside the clone, without the system's site-packages, activates
    it, and only then runs the test command: nothing installed on the machine by hand can hide a
    requirement that pyproject.toml does not declare. It installs nothing else."""
    lines = [ln for ln in ci_lines() if ln and not ln.startswith("#")]
    text = "\n".join(lines)
    assert "system-site-packages" not in text and "PYTHONPATH" not in text and "PIP_" not in text
    make = [
        i for i, ln in enumerate(lines) if re.fullmatch(r"python3 -m venv (--clear )?\.venv", ln)
    ]
    activate = [
        i
        for i, ln in enumerate(lines)
        if ln in (". .venv/bin/activate", "source .venv/bin/activate")
    ]
    run = lines.index(readme_test_command())
    assert make and activate and make[0] < activate[0] < run, lines
    assert not any("deactivate" in ln for ln in lines[activate[0] : run])
    assert [ln for ln in lines if "pip install" in ln or "apt-get install" in ln] == [
        readme_test_command()
    ]
    assert ".venv/" in (ROOT / ".gitignore").read_text().splitlines()


def test_every_link_leads_to_a_file():
    for target in re.findall(r"\]\(([^)#]+)\)", README):
        if "://" not in target:
            assert (ROOT / target).exists(), target


def test_every_test_named_as_proof_exists():
    named = re.findall(r"`(test_[a-z0-9_]+\.py)(?:::(test_[a-z0-9_]+))?`", README)
    named += [(None, fn) for fn in re.findall(r"`::(test_[a-z0-9_]+)`", README)]
    assert len(named) >= 10
    sources = {p.name: p.read_text() for p in (ROOT / "tests").rglob("test_*.py")}
    everything = "\n".join(sources.values())
    for file, fn in named:
        if file:
            assert file in sources, file
        if fn:
            assert f"def {fn}(" in (sources[file] if file else everything), (file, fn)
