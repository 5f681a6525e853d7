"""A folder nested thousands deep under a purge path (a hostile layout, or a runaway script):
the scan is a loop with a depth bound, so the purge refuses it as `unreadable` with the reason,
instead of a RecursionError answered as `internal`; a tree within the bound is walked whole."""

from __future__ import annotations

from fleetdeck.backend.host.purge import facts, paths, verdict

from support.deep_tree import _nest, _unnest
from support.weights import safetensors


def test_a_folder_nested_past_the_bound_is_refused_with_its_reason(tmp_path):
    root = tmp_path / "runs"
    target = root / "run-1" / "checkpoints" / "checkpoint-5"
    (target / "deep").mkdir(parents=True)
    (target / "adapter_model.safetensors").write_bytes(safetensors(b"x" * 64))
    _nest(target / "deep", 1200)
    try:
        got = facts.gather([str(target)], [str(root)], hashing=False)
        p = got["paths"][0]
        assert "nested more than" in (p["scan_error"] or ""), p["scan_error"]
        judged = verdict.evaluate(got)["paths"][0]
        assert "unreadable" in [r[0] for r in judged["refusals"]]
    finally:
        _unnest(target / "deep")


def test_a_tree_within_the_bound_is_walked_whole_depth_first(tmp_path):
    top = tmp_path / "t"
    (top / "a" / "b").mkdir(parents=True)
    (top / "a" / "b" / "f").write_text("1")
    (top / "a" / "g").write_text("2")
    (top / "z").write_text("3")
    import os

    before = len(os.listdir("/proc/self/fd"))
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        seen = []
        paths.scan(fd, str(top), lambda p, name, st: seen.append(p[len(str(top)) :]))
    finally:
        os.close(fd)
    assert sorted(seen) == ["/a", "/a/b", "/a/b/f", "/a/g", "/z"]
    assert seen.index("/a") < seen.index("/a/b") < seen.index("/a/b/f")
    # the descriptors opened for sub-folders are all closed again
    assert len(os.listdir("/proc/self/fd")) == before
