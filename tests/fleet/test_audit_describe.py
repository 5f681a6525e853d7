"""How an audit record reads in `fleetdeck audit` and the Audit view (`state.describe`): byte
counts of any action in the caller's units, strings escaped, never JSON."""

from __future__ import annotations

from fleetdeck.show.audit_text import describe


def mib(n: int) -> str:
    return f"{n / 2**20:.1f}M"


def test_a_mirror_record_reads_its_byte_counts_in_the_callers_units():
    rec = {
        "time": "2026-12-01T05:00:00Z",
        "user": "op",
        "host": "b",
        "action": "mirror",
        "result": "done",
        "src": "a:/runs/x\n/adapter",
        "dst": "b:/copy",
        "bytes": 48 << 20,
        "bytes_src": 48 << 20,
        "bytes_dst": 0,
        "free_bytes_after": 3 << 20,
        "files": 2,
        "verified": True,
    }
    summary, lines = describe(rec, mib)
    assert summary == "src a:/runs/x\\n/adapter; dst b:/copy; 48.0M"
    assert "bytes: 48.0M" in lines and "bytes_src: 48.0M" in lines and "bytes_dst: 0.0M" in lines
    assert "free_bytes_after: 3.0M" in lines
    assert "files: 2" in lines and "verified: True" in lines, (
        "counts that are not bytes stay numbers"
    )


def test_fields_that_only_look_like_sizes_are_left_alone():
    rec = {
        "action": "schedules-remove",
        "result": "done",
        "bytesize": 5,
        "bytes": "many",
        "ok_bytes": True,
    }
    summary, lines = describe(rec, mib)
    assert "bytesize: 5" in lines and "bytes: many" in lines and "ok_bytes: True" in lines
    assert "M" not in summary


def test_a_corrupt_byte_count_reads_as_text_not_a_crash():
    from fleetdeck.backend.host.lib.units import size_short

    huge = int("9" * 400)
    summary, lines = describe(
        {"action": "mirror", "result": "done", "dst": "b:/x", "bytes": huge}, size_short
    )
    assert f"bytes: {'9' * 400}" in lines and summary == "dst b:/x"
    summary, lines = describe({"action": "other", "result": "done", "bytes": 5}, mib)
    assert summary == "bytes 5" and lines == ["bytes: 0.0M"]
