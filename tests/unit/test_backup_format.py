"""The backup file's layout (jpu.tools.backup_format): what `verify` accepts and what it refuses,
naming the fault, before a restore touches any server (docs/operations.md)."""

from __future__ import annotations

import io

import pytest

from jpu.tools.backup_format import FORMAT, VERSION, BackupInvalid, Writer, frames, verify


def backup_bytes(messages: int = 5, *, version: int = VERSION) -> bytes:
    out = io.BytesIO()
    w = Writer(out)
    w.frame("header", format=FORMAT, version=version, stream="JPU", prefix="jpu", migrations=[])
    w.frame("table", name="labs")
    w.frame("row", v='{"name": "BCG"}')
    w.frame("table_end", name="labs", rows=1)
    w.frame("stream", name="JPU", config={"name": "JPU"}, first_seq=1, last_seq=messages + 2)
    for seq in range(1, messages + 1):
        w.frame(
            "msg", seq=seq if seq < 3 else seq + 2, subject=f"jpu.job.{seq}",
            headers={"Nats-Msg-Id": f"e{seq}"}, data=b"{}", time_ns=seq,
        )  # fmt: skip
    w.frame("stream_end", name="JPU", messages=messages, last_seq=messages + 2)
    w.close()
    return out.getvalue()


def test_E2_a_whole_backup_verifies_with_its_streams_holes_and_tables() -> None:
    summary = verify(io.BytesIO(backup_bytes()))
    [stream] = summary.streams
    assert (stream.name, stream.messages, stream.first_seq, stream.last_seq) == ("JPU", 5, 1, 7)
    assert summary.tables == {"labs": 1}
    kinds = [f["k"] for f in frames(io.BytesIO(backup_bytes()))]
    assert kinds[0] == "header" and kinds[-1] == "end" and kinds.count("msg") == 5


@pytest.mark.parametrize("cut", [1, 7, 20, 100, -60, -1])
def test_E6_a_truncated_backup_is_refused_as_truncated(cut: int) -> None:
    data = backup_bytes()
    with pytest.raises(BackupInvalid, match="truncated"):
        verify(io.BytesIO(data[:cut]), "b.jpubak")


def test_E6_a_flipped_byte_is_refused_by_the_checksum_or_the_framing() -> None:
    data = backup_bytes()
    refused = 0
    for i in range(len(b"JPUBAK1\n"), len(data) - 120):  # every byte before the end record
        bad = data[:i] + bytes([data[i] ^ 0x40]) + data[i + 1 :]
        with pytest.raises(BackupInvalid) as e:
            verify(io.BytesIO(bad), "b.jpubak")
        assert str(e.value).startswith("b.jpubak: ")
        refused += 1
    assert refused > 100
    middle = len(data) // 2
    bad = data[:middle] + bytes([data[middle] ^ 0x01]) + data[middle + 1 :]
    with pytest.raises(BackupInvalid, match="checksum mismatch"):
        verify(io.BytesIO(bad))


def test_E6_other_files_versions_and_trailing_bytes_are_refused() -> None:
    with pytest.raises(BackupInvalid, match="not a JPU-Share backup"):
        verify(io.BytesIO(b"PK\x03\x04zip"))
    with pytest.raises(BackupInvalid, match="format version 2"):
        verify(io.BytesIO(backup_bytes(version=2)))
    with pytest.raises(BackupInvalid, match="after the end record"):
        verify(io.BytesIO(backup_bytes() + b"x"))
