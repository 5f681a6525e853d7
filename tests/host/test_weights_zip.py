"""A `pytorch_model.bin` is judged by its zip end record before its central directory is read:
a crafted directory naming more members than any torch.save writes is refused with a sentence,
and judging it costs little memory (zipfile would build an object per member first)."""

from __future__ import annotations

import os
import struct
import tracemalloc
import zipfile

from fleetdeck.backend.host.lib import weights

from support.weights import torch_zip


def _judge(folder, name="pytorch_model.bin"):
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        weights._CACHE.clear()
        tracemalloc.start()
        try:
            why = weights.file_problem(fd, name)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        return why, peak
    finally:
        os.close(fd)


def test_a_directory_of_more_members_than_the_bound_is_refused_before_it_is_read(tmp_path):
    n = weights.ZIP_MEMBERS_LIMIT + 1
    with zipfile.ZipFile(tmp_path / "pytorch_model.bin", "w", zipfile.ZIP_STORED) as z:
        for i in range(n):
            z.writestr(zipfile.ZipInfo(f"a/{i}"), b"")
    why, peak = _judge(tmp_path)
    assert why == f"pytorch_model.bin names {n:,} members, more than {weights.ZIP_MEMBERS_LIMIT:,}"
    # zipfile's own reading of this directory builds some 130,000 objects: tens of MB
    assert peak < 2 * 1024 * 1024, peak


def _end_record(members, cd_size, cd_offset=0):
    return b"PK\x05\x06" + struct.pack("<HHHHIIH", 0, 0, members, members, cd_size, cd_offset, 0)


def test_an_end_record_that_claims_a_huge_directory_is_refused_naming_its_size(tmp_path):
    body = os.urandom(4096)
    (tmp_path / "pytorch_model.bin").write_bytes(body + _end_record(1000, 3_000_000_000))
    why, _ = _judge(tmp_path)
    assert why == (
        "pytorch_model.bin has a central directory of 3,000,000,000 bytes, more than "
        f"{weights.ZIP_DIRECTORY_LIMIT:,}"
    )


def test_a_zip64_end_record_is_read_for_its_member_count(tmp_path):
    body = os.urandom(1024)
    z64 = b"PK\x06\x06" + struct.pack("<QHHIIQQQQ", 44, 45, 45, 0, 0, 10**9, 10**9, 4096, 0)
    locator = b"PK\x06\x07" + struct.pack("<IQI", 0, len(body), 1)
    (tmp_path / "pytorch_model.bin").write_bytes(
        body + z64 + locator + _end_record(0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF)
    )
    why, _ = _judge(tmp_path)
    assert why == (
        f"pytorch_model.bin names 1,000,000,000 members, more than {weights.ZIP_MEMBERS_LIMIT:,}"
    )


def test_a_whole_torch_archive_is_still_whole_and_a_cut_one_torn(tmp_path):
    whole = torch_zip(os.urandom(1 << 12))
    (tmp_path / "pytorch_model.bin").write_bytes(whole)
    assert _judge(tmp_path)[0] is None
    (tmp_path / "pytorch_model.bin").write_bytes(whole[: len(whole) - 30])
    assert _judge(tmp_path)[0].startswith("torn: pytorch_model.bin is not a whole zip archive")
