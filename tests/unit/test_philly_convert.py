"""Philly trace -> simulator workload (SPEC §10 inputs)."""

from __future__ import annotations

from datetime import datetime

import pytest

from jpu.sim.philly import ConvertOptions, convert_rows
from jpu.sim.workload import WorkloadError

CSV = """timestamp,duration,num_gpus,gpu_time,cluster
2017-10-09 07:01:55,66.0,1,66.0,11cb48
2017-10-09 06:13:03,2951.0,1,2951.0,6214e9
2017-10-11 06:13:36,2759.0,16,44144.0,6214e9
2017-10-09 06:20:00,10.0,4,40.0,6214e9
2017-10-09 06:13:03,5.0,8,40.0,11cb48
""".splitlines(keepends=True)


def test_labs_users_ids_and_relative_submit_times() -> None:
    jobs, stats = convert_rows(CSV, ConvertOptions(users_per_lab=2))
    assert [(j.id, j.lab, j.user, j.submit_s, j.num_gpus, j.duration_s) for j in jobs] == [
        ("p000002", "vc-6214e9", "vc-6214e9-u0", 0.0, 1, 2951.0),  # earliest; ties by trace row
        ("p000005", "vc-11cb48", "vc-11cb48-u0", 0.0, 8, 5.0),
        ("p000004", "vc-6214e9", "vc-6214e9-u1", 417.0, 4, 10.0),  # users dealt round-robin
        ("p000001", "vc-11cb48", "vc-11cb48-u1", 2932.0, 1, 66.0),
        ("p000003", "vc-6214e9", "vc-6214e9-u0", 2 * 86400 + 33.0, 8, 2759.0),  # clamped 16 -> 8
    ]
    assert (stats.read, stats.kept, stats.clamped, stats.dropped_oversize) == (5, 5, 1, 0)


def test_oversize_drop_window_and_scale() -> None:
    jobs, stats = convert_rows(CSV, ConvertOptions(oversize="drop", max_gpus=4))
    assert {j.id for j in jobs} == {"p000001", "p000002", "p000004"}
    assert stats.dropped_oversize == 2
    jobs, stats = convert_rows(CSV, ConvertOptions(start=datetime(2017, 10, 9, 6, 15), days=1))
    assert [j.id for j in jobs] == ["p000004", "p000001"] and stats.outside_window == 3
    assert jobs[0].submit_s == 0.0  # relative to the first kept job
    jobs, _ = convert_rows(CSV, ConvertOptions(scale=0.5))
    assert [j.submit_s for j in jobs] == [0.0, 0.0, 208.5, 1466.0, (2 * 86400 + 33.0) / 2]
    assert jobs[-1].duration_s == 2759.0  # durations are never scaled
    jobs, stats = convert_rows(CSV, ConvertOptions(days=0.5))  # window from the first job
    assert len(jobs) == 4 and stats.outside_window == 1


def test_deterministic() -> None:
    assert convert_rows(CSV, ConvertOptions()) == convert_rows(CSV, ConvertOptions())


def test_bad_rows_name_the_line() -> None:
    bad = [*CSV[:2], "yesterday,1,1,1,abc\n"]
    with pytest.raises(WorkloadError, match=r":3: "):
        convert_rows(bad, ConvertOptions())
    with pytest.raises(WorkloadError, match="missing columns"):
        convert_rows(["a,b\n", "1,2\n"], ConvertOptions())


def test_R7_user_style_limits_overestimate_rounded_up_to_the_hour_seeded_per_job() -> None:
    """SPEC R7's evaluation: limit = run × U(lo, hi) rounded up to the hour (≥ 1 h), the same
    for a job in every window (drawn from the seed and its id), none without the option."""
    assert all(j.time_limit_s is None for j in convert_rows(CSV, ConvertOptions())[0])
    opts = ConvertOptions(limits=(1.2, 4.0), limits_seed=7)
    jobs, _ = convert_rows(CSV, opts)
    for j in jobs:
        assert j.time_limit_s is not None and j.time_limit_s % 3600 == 0
        assert max(3600.0, 1.2 * j.duration_s) <= j.time_limit_s < 4.0 * j.duration_s + 3600
    again = {j.id: j.time_limit_s for j in convert_rows(CSV, opts)[0]}
    window = ConvertOptions(limits=(1.2, 4.0), limits_seed=7, start=datetime(2017, 10, 9, 6, 15))
    assert all(again[j.id] == j.time_limit_s for j in convert_rows(CSV, window)[0])
    with pytest.raises(WorkloadError):
        convert_rows(CSV, ConvertOptions(limits=(0.5, 2.0)))
