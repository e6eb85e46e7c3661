"""Which snapshots a put keeps (jpu.bus.snapshots.retained, SPEC O6 "fast on a year of log"):
the newest `snapshot_keep`, and the first of each of the latest hours, days and weeks, so an
explanation of any moment in the last year starts from a snapshot shortly before it."""

from __future__ import annotations

from jpu.bus.snapshots import DAY, HOUR, WEEK, retained
from jpu.config import load_config

T0 = 1_700_000_000.0 // WEEK * WEEK  # a week boundary


def test_E3_U4_snapshot_history_keeps_the_newest_and_the_first_of_each_hour_day_week() -> None:
    # a snapshot every 5 minutes for 60 days: seq = minutes since T0
    snaps = [(m, T0 + 60.0 * m) for m in range(0, 60 * 24 * 60, 5)]
    keep = retained(snaps, 3, ((HOUR, 24), (DAY, 31), (WEEK, 52)))
    newest = snaps[-1][0]
    assert {newest, newest - 5, newest - 10} <= keep  # snapshot_keep
    hours = {s for s in keep if s >= newest - 23 * 60 - 55}
    assert len(hours) == 24 + 3  # the first of each of the last 24 hours, the 3 newest
    days = sorted(s for s in keep if s % (24 * 60) == 0)  # first of a day is at minute 0
    assert days[-31:] == [d * 24 * 60 for d in range(29, 60)]  # the last 31 days
    assert 0 in keep  # the first week's first: weeks reach back further than days
    assert len(keep) <= 3 + 24 + 31 + 52
    # what a put deletes: nothing the next put would want back
    again = retained([*snaps, (newest + 5, T0 + 60.0 * (newest + 5))], 3, ((HOUR, 24),))
    assert again <= keep | {newest + 5}


def test_E3_without_history_only_the_newest_are_kept() -> None:
    snaps = [(s, T0 + s) for s in range(10)]
    assert retained(snaps, 3) == {7, 8, 9}
    assert retained(snaps, 3, ((HOUR, 0), (DAY, 0))) == {7, 8, 9}
    assert retained([], 3) == set()


def test_O1_snapshot_history_defaults_and_env() -> None:
    c = load_config(env={})
    assert (c.snapshot_hourly, c.snapshot_daily, c.snapshot_weekly) == (24, 31, 52)
    c = load_config(env={"JPU_SNAPSHOT_DAILY": "7"})
    assert c.snapshot_daily == 7
