"""SPEC E1: events are immutable tagged msgspec structs with a stable wire format."""

import msgspec
import pytest

from jpu import events as ev


def _submitted() -> ev.JobSubmitted:
    return ev.JobSubmitted(
        event_id=ev.new_event_id(),
        ts=12.5,
        job_id="j1",
        lab="BCG",
        user="alice",
        name="train",
        command="python train.py",
        num_gpus=2,
        tiers=["rtx4090"],
        env={"SEED": "1"},
    )


def test_E1_round_trip_every_event_type_keeps_type_tag() -> None:
    e = _submitted()
    data = ev.encode(e)
    assert b'"type":"JobSubmitted"' in data
    assert ev.decode(data) == e


def test_E1_events_are_immutable() -> None:
    e = _submitted()
    with pytest.raises(AttributeError):
        e.num_gpus = 3  # type: ignore[misc]


def test_E1_every_event_has_id_ts_and_schema_version() -> None:
    for cls in ev.EVENT_TYPES:
        names = set(cls.__struct_fields__)
        assert {"event_id", "ts", "schema_version"} <= names, cls.__name__
        assert cls.__struct_config__.tag == cls.__name__, "tags are explicit and stable"


def test_E1_unknown_type_and_bad_field_are_rejected_clearly() -> None:
    with pytest.raises(msgspec.ValidationError, match="Invalid value 'Nope'"):
        ev.decode(b'{"type":"Nope","event_id":"x","ts":1}')
    with pytest.raises(msgspec.ValidationError, match="num_gpus"):
        ev.decode(
            b'{"type":"JobSubmitted","event_id":"x","ts":1,"job_id":"j","lab":"L",'
            b'"user":"u","name":"n","command":"c","num_gpus":"two"}'
        )


def test_E2_job_events_share_one_subject_per_job() -> None:
    e = _submitted()
    d = ev.JobDispatched(event_id="d", ts=1, job_id="j1", attempt=1, node="n", tier="t", gpus=[0])
    assert ev.subject_for(e) == ev.subject_for(d) == "jpu.job.j1"
    charged = ev.UsageCharged(event_id="u", ts=1, lab="BCG", amount=1, value_after=1, as_of=1)
    assert ev.subject_for(charged, prefix="x") == "x.lab.BCG"
