"""`jpu why` and `jpu-admin explain-usage` in words (SPEC U4, F5): the pure renderers on
SPEC R3's worked example as the simulator plays it, and how the language is chosen."""

from __future__ import annotations

import msgspec

from jpu.cli.why import language, render
from jpu.explain.usage import explain_usage, ledger, usage_statement
from jpu.explain.wait import wait_timeline
from jpu.testing.simkit import HALF_LIFE, Simulate, r3_example
from jpu.tools.admin_usage import render_explanation, render_statement, when


def test_U4_why_says_what_demoted_X_in_english_and_korean(simulate: Simulate) -> None:
    _, config, log = r3_example(simulate)
    wait = msgspec.to_builtins(wait_timeline(log, "x", config))
    en = render(wait, "en")
    # Y's run: 301 s × 82.6, on the GPU beside X's reservation
    assert "because job y (BCG) ended, freeing GPU 0 on n1, charging BCG 24,863 TFLOP-s" in en
    assert "demoted, it was no longer rank 1; 24,780 TFLOP-s charged to BCG at once (R3)" in en
    assert "then KDG's job z (" in en
    assert "reserving, rank 2 of 2 — a higher-ranked job takes the resources it needs" in en
    assert "reserving 5m00s" in en and "running 16m40s" in en
    ko = render(wait, "ko")
    assert "y (BCG) 작업이 끝나 n1의 GPU 0가 비었음 — BCG에 24,863 TFLOP-s 부과" in ko
    assert "24,780 TFLOP-s를 즉시 BCG에 부과 (R3)" in ko and "1위: KDG 연구실의 작업 z" in ko
    assert "예약 5m00s" in ko


def test_U4_language_from_flag_env_or_locale() -> None:
    assert language("ko", {"LANG": "en_US.UTF-8"}) == "ko"
    assert language(None, {"JPU_LANG": "ko", "LANG": "en_US"}) == "ko"
    assert language(None, {"LANG": "ko_KR.UTF-8"}) == "ko"
    assert language(None, {"LC_ALL": "C", "LANG": "ko_KR.UTF-8"}) == "en"  # LC_ALL wins
    assert language(None, {}) == "en"


def test_F5_explain_usage_and_statement_tables(simulate: Simulate) -> None:
    _, _, log = r3_example(simulate)
    book = ledger(log)
    table = render_explanation(explain_usage(book, "BCG", 5_000.0, HALF_LIFE))
    assert "reservation (R3, at release)" in table and "24,780.000" in table
    assert table.count("\n") == 1 + 4 + 1  # head, columns, 4 charges, the sums
    statement = render_statement(usage_statement(book))
    assert "GPU-H rtx4090" in statement and statement.splitlines()[2].startswith("BCG")
    assert when("1700000000") == 1_700_000_000.0
    assert when("2026-12-01T09:00:00+00:00") == 1_796_115_600.0
