"""SPEC U8: job ids as a Slurm user types them, read by one pure parser: a (prefix of an) id,
an array task `PREFIX_K`, and for cancel/hold/release a task range `PREFIX_[2-4,7]`."""

from __future__ import annotations

import pytest

from jpu.cli.rest.client import RestError
from jpu.cli.rest.ids import expand_ids, one_id
from jpu.domain import jobids
from jpu.domain.jobids import JobRef


@pytest.mark.parametrize(
    ("text", "ref"),
    [
        ("a1332f", JobRef("a1332f")),
        ("a1332f0e9d8c7b6a5f4e3d2c", JobRef("a1332f0e9d8c7b6a5f4e3d2c")),
        ("a1332_1", JobRef("a1332", (1,))),
        (" a1_12 ", JobRef("a1", (12,))),
    ],
)
def test_U8_an_id_a_prefix_or_an_array_task(text: str, ref: JobRef) -> None:
    assert jobids.parse(text) == ref


def test_U8_task_ranges_for_cancel_hold_and_release() -> None:
    ref = jobids.parse("a1332_[2-4,7]", ranges=True)
    assert ref == JobRef("a1332", (2, 3, 4, 7))
    assert ref.ids() == ["a1332_2", "a1332_3", "a1332_4", "a1332_7"]
    assert jobids.parse("x_[3,1-2,3]", ranges=True).tasks == (3, 1, 2)  # each once
    assert expand_ids(["ab", "cd_[0-1]"], ranges=True) == ["ab", "cd_0", "cd_1"]


@pytest.mark.parametrize("text", ["", "a b", "a_x", "a_[4-2]", "a_[]", "a_[1-]", "a_[0-99999]"])
def test_U8_what_is_not_an_id_is_refused_saying_what_is(text: str) -> None:
    with pytest.raises(ValueError, match=r"ID|tasks|backwards|at most"):
        jobids.parse(text, ranges=True)


def test_U8_a_range_names_one_job_only_where_several_are_taken() -> None:
    with pytest.raises(ValueError, match="a range only for cancel, hold and release"):
        jobids.parse("a_[1-3]")
    with pytest.raises(RestError, match="a range only for cancel"):
        one_id("a_[1-3]")
    assert one_id("a1_3") == "a1_3"
