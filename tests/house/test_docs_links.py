"""Every cross-reference in the README and docs resolves: each relative link names a file that
exists, and each `#anchor` a heading of that file (GitHub's anchor rule)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")


def anchors(path: Path) -> set[str]:
    out = set()
    in_code = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code or not line.startswith("#"):
            continue
        title = line.lstrip("#").strip().lower()
        slug = re.sub(r"[^\w\- ]", "", title).replace(" ", "-")
        out.add(slug)
    return out


def links(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    return LINK.findall(text) + IMAGE.findall(text)


def test_every_relative_link_and_anchor_resolves():
    bad = []
    for doc in DOCS:
        for target in links(doc):
            if re.match(r"^[a-z]+:", target):
                continue  # http(s), mailto: not checked here (no network)
            file, _, anchor = target.partition("#")
            dest = (doc.parent / file).resolve() if file else doc
            if not dest.exists():
                bad.append(f"{doc.relative_to(REPO)}: {target} (no such file)")
                continue
            if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                bad.append(f"{doc.relative_to(REPO)}: {target} (no such heading)")
    assert not bad, "\n".join(bad)


def test_every_doc_is_reachable_from_the_readme_or_another_doc():
    linked = {
        (doc.parent / t.partition("#")[0]).resolve()
        for doc in DOCS
        for t in links(doc)
        if not re.match(r"^[a-z]+:", t) and t.partition("#")[0]
    }
    orphans = [d.name for d in DOCS[1:] if d.resolve() not in linked]
    assert not orphans, f"docs nobody links to: {orphans}"


PATHS = re.compile(r"(?<![\w./-])((?:docs|benchmarks|tests|backend|tui|\.ci)/[\w./-]*[\w])")


def test_every_path_named_in_the_docs_and_the_fleet_file_exists():
    """A path named in prose or code spans (`docs/trainer.md`, `backend/host/probe/main.py`,
    `benchmarks/results/SUMMARY.md`) exists in the tree; globs and placeholders aside."""
    bad = []
    for doc in [*DOCS, REPO / "hosts.toml"]:
        text = doc.read_text(encoding="utf-8")
        for m in PATHS.finditer(text):
            p = m.group(1).rstrip(".")
            if (
                text[m.end() : m.end() + 1] in ("*", "{", "<")
                or any(c in p for c in "*<>{}")
                or p.endswith("/")
            ):
                continue  # a glob or a placeholder
            if not (REPO / p).exists():
                bad.append(f"{doc.relative_to(REPO)}: {p}")
    assert not bad, "\n".join(sorted(set(bad)))


def test_the_architecture_map_names_every_folder_and_only_folders_that_exist():
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    table = text[
        text.index("## Where everything lives") : text.index("\n\n", text.index("| --- |"))
    ]
    named = set(re.findall(r"^\| `([\w/.-]+)/` \|", table, flags=re.M))
    assert named, "the map's table has rows"
    missing = sorted(n for n in named if not (REPO / n).is_dir())
    assert not missing, f"the map names folders that do not exist: {missing}"
    folders = {
        str(p.relative_to(REPO))
        for top in ("backend", "tui", "tests", "benchmarks", "docs")
        for p in [REPO / top, *(REPO / top).rglob("*")]
        if p.is_dir()
        and not any(part.startswith(("__", ".")) for part in p.relative_to(REPO).parts)
    }
    unnamed = sorted(f for f in folders if f not in named)
    assert not unnamed, f"folders the map does not name: {unnamed}"
