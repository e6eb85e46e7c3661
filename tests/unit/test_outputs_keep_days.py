"""outputs_keep_days: when an ended job's output directory may go (jpu.domain.retention)."""

from __future__ import annotations

import pytest

from jpu.config import ConfigError, load_config
from jpu.domain.retention import DAY_S, EndedJob, output_expired

NOW = 100 * DAY_S


def test_outputs_keep_days_zero_keeps_every_output() -> None:
    assert not output_expired(EndedJob(terminal=True, last_event_ts=0.0), NOW, 0)


def test_outputs_keep_days_counts_from_the_jobs_last_event() -> None:
    ended = EndedJob(terminal=True, last_event_ts=NOW - 7 * DAY_S)
    assert output_expired(ended, NOW, 7)
    assert not output_expired(ended, NOW - 1.0, 7)  # one second short of 7 days


def test_outputs_keep_days_never_touches_a_job_that_may_still_move() -> None:
    # running, or waiting for its OOM retry (R5): not terminal, however old its last event
    assert not output_expired(EndedJob(terminal=False, last_event_ts=0.0), NOW, 1)


def test_outputs_keep_days_keeps_what_the_log_does_not_know() -> None:
    assert not output_expired(None, NOW, 1)


def test_outputs_keep_days_is_never_negative() -> None:
    with pytest.raises(ConfigError, match="outputs_keep_days"):
        load_config(env={"JPU_OUTPUTS_KEEP_DAYS": "-1"})
    assert load_config(env={"JPU_OUTPUTS_KEEP_DAYS": "30"}).outputs_keep_days == 30
