"""E3: the reader checks each message's consumer sequence and a rebuild orders by its stream
sequence — read from the ack reply subject, they are what nats-py's own metadata says."""

from __future__ import annotations

from typing import Any, cast

from hypothesis import given
from hypothesis import strategies as st
from nats.aio.msg import Msg

from jpu.bus.ordered import sequences

_n = st.integers(1, 2**63 - 1)
_name = st.from_regex(r"[A-Za-z0-9_-]{1,12}", fullmatch=True)


def _msg(reply: str) -> Msg:
    return Msg(_client=cast(Any, None), subject="jpu.x", reply=reply)


@given(stream=_name, consumer=_name, delivered=_n, sseq=_n, cseq=_n, ts=_n, pending=_n)
def test_E3_sequences_from_a_v1_reply_are_nats_metadata(
    stream: str, consumer: str, delivered: int, sseq: int, cseq: int, ts: int, pending: int
) -> None:
    m = _msg(f"$JS.ACK.{stream}.{consumer}.{delivered}.{sseq}.{cseq}.{ts}.{pending}")
    assert sequences(m) == (m.metadata.sequence.stream, m.metadata.sequence.consumer)
    assert sequences(m) == (sseq, cseq)


@given(domain=_name, stream=_name, consumer=_name, sseq=_n, cseq=_n, ts=_n)
def test_E3_sequences_from_a_v2_reply_are_nats_metadata(
    domain: str, stream: str, consumer: str, sseq: int, cseq: int, ts: int
) -> None:
    m = _msg(f"$JS.ACK.{domain}.ACCHASH.{stream}.{consumer}.1.{sseq}.{cseq}.{ts}.0.rnd")
    assert sequences(m) == (m.metadata.sequence.stream, m.metadata.sequence.consumer)
    assert sequences(m) == (sseq, cseq)
