"""`jpu why` says what really happened (SPEC U4, S1, Q5, D7, X8): the pure story on logs written
by hand, event by event, and every sentence it can produce, in the CLI and in the console.

A story never claims a wait for a slot that did not happen (promoted at once), names the jobs
that held the slots when it did, never says "dispatched because it was dispatched", and never
shows an event's type: every "because" is one of jpu.explain.wait.CauseKind, in words.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest

from jpu.bus import Delivered
from jpu.cli.why import _T, render
from jpu.config import Config, load_config
from jpu.events import (
    EVENT_TYPES,
    Event,
    JobArray,
    JobCancelRequested,
    JobDispatched,
    JobEnded,
    JobPromoted,
    JobRetryScheduled,
    JobStarted,
    JobSubmitted,
    MaintenanceChanged,
    UsageCharged,
)
from jpu.explain.wait import CAUSE_KINDS, Cause, WaitTimeline, wait_timeline

ROOT = Path(__file__).resolve().parents[3]
WHY_JS = ROOT / "libs" / "jpu_services" / "gateway" / "console" / "why.js"
CATALOG = ROOT / "libs" / "jpu" / "explain" / "why.json"  # the CLI's and the console's sentences
EVENT_NAMES = [t.__name__ for t in EVENT_TYPES]
N4090 = ("gpu-4090x2-01", "gpu-4090x2-02")


@pytest.fixture(scope="module")
def config() -> Config:
    return load_config(ROOT / "config" / "sample-cluster.yaml", env={})


class Log:
    """A log written by hand, as the services would append it."""

    def __init__(self) -> None:
        self.events: list[Delivered] = []

    def add(self, cls: type[Event], **kw: Any) -> None:
        kw.setdefault("event_id", f"e{len(self.events) + 1}")
        self.events.append(Delivered(len(self.events) + 1, "t", cls(**kw), {}))

    def submit(self, job: str, user: str, lab: str, t: float, n: int = 1, **kw: Any) -> None:
        self.add(JobSubmitted, ts=t, job_id=job, lab=lab, user=user, name=job, command="c",
                 num_gpus=n, **kw)  # fmt: skip

    def promote(self, job: str, t: float) -> None:
        self.add(JobPromoted, ts=t, job_id=job, queue_entered_at=t)

    def run(self, job: str, t: float, node: str, tier: str, gpus: list[int]) -> None:
        self.add(JobDispatched, ts=t, job_id=job, attempt=1, node=node, tier=tier, gpus=gpus)
        self.add(JobStarted, ts=t + 0.5, job_id=job, attempt=1, backend_job_id=f"b-{job}")

    def end(self, job: str, t: float, node: str, tier: str, gpus: list[int], **kw: Any) -> None:
        kw.setdefault("state", "COMPLETED")
        kw.setdefault("attempt", 1)
        self.add(JobEnded, ts=t, job_id=job, node=node, tier=tier, gpus=gpus, **kw)


def story(log: Log, job: str, config: Config, now: float) -> tuple[WaitTimeline, dict[str, Any]]:
    t = wait_timeline(log.events, job, config, now=now)
    return t, msgspec.to_builtins(t)


def no_event_names(text: str) -> None:
    for name in EVENT_NAMES:
        assert name not in text, (name, text)


def test_why_promoted_at_once_S1(config: Config) -> None:
    """A user with no job holding a slot is promoted at once (Q5): the story never says all of
    the user's slots are in use (the old first line of every story)."""
    log = Log()
    log.submit("j1", "bcg-alice", "BCG", 10.0)
    log.promote("j1", 10.2)
    t, wait = story(log, "j1", config, 20.0)
    personal, promoted = t.steps[0], t.steps[1]
    assert (personal.state, personal.pending_reason, personal.slot_holders) == (
        "PERSONAL_QUEUE_WAIT", None, [],
    )  # fmt: skip
    assert promoted.cause is not None and promoted.cause.kind == "promoted_free_slot"
    assert (promoted.cause.user, promoted.cause.count) == ("bcg-alice", 0)
    en = render(wait, "en")
    assert "slots are" not in en and "(S1)" not in en
    assert (
        "because bcg-alice had a free slot (0 of their other jobs held slots): promoted at once"
        in en
    )
    assert "곧바로 전역 대기열로 올라감" in render(wait, "ko")


def test_why_waited_for_a_slot_names_the_jobs_that_held_them_S1(config: Config) -> None:
    """When it really waited in the personal queue: the jobs holding the user's slots, and the
    one whose end freed the slot it was promoted into (Q5)."""
    log = Log()
    log.submit("a1", "bcg-alice", "BCG", 0.0)
    log.promote("a1", 0.0)
    log.run("a1", 0.1, N4090[0], "rtx4090", [0])
    log.submit("a2", "bcg-alice", "BCG", 10.0)  # alice's limit is reached: it stays personal
    log.end("a1", 70.0, N4090[0], "rtx4090", [0], exit_code=0)
    log.promote("a2", 70.2)
    t, wait = story(log, "a2", config, 80.0)
    personal = t.steps[0]
    assert (personal.pending_reason, personal.slot_holders) == ("ConcurrencyLimit", ["a1"])
    cause = t.steps[1].cause
    assert cause is not None and (cause.kind, cause.jobs) == ("promoted_slot_freed", ["a1"])
    assert cause.waited_s == pytest.approx(60.2)
    en = render(wait, "en")
    assert (
        "in the personal queue — waiting for a slot: all of bcg-alice's slots are held, by a1" in en
    )
    assert (
        "because job a1 ended and freed one of bcg-alice's slots: promoted after 1m00s (Q5)" in en
    )
    assert t.phases["personal_queue"] == pytest.approx(60.2)


def test_why_still_in_the_personal_queue_with_no_slot_held_is_the_limit_S1(
    config: Config,
) -> None:
    """Not promoted, and no job of the user holds a slot (a limit of 0): it does wait for a
    slot, and the story says the limit admits no more, naming no job."""
    log = Log()
    log.submit("z1", "bcg-zoe", "BCG", 0.0)
    t, wait = story(log, "z1", config, 600.0)
    (step,) = t.steps
    assert (step.pending_reason, step.slot_holders) == ("ConcurrencyLimit", [])
    en = render(wait, "en")
    assert "waiting for a slot: no job of bcg-zoe holds one, yet their limit (max_active_jobs) " \
        "admits no more now (S1)" in en  # fmt: skip
    assert t.phases["personal_queue"] == 600.0


def test_why_a_task_beyond_its_arrays_throttle_names_the_tasks_holding_it_Q7_D7(
    config: Config,
) -> None:
    """An array `0-2%2`: task 2 waits for the array's %2 (ArrayThrottle), not for the user's
    slots; the story names the two tasks holding them, and once one ends it is promoted."""
    log = Log()
    log.submit("A", "bcg-alice", "BCG", 0.0, array=JobArray(tasks=[0, 1, 2], throttle=2,
                                                             spec="0-2%2"))  # fmt: skip
    for k, gpu in ((0, 0), (1, 1)):
        log.promote(f"A_{k}", 0.0)
        log.run(f"A_{k}", 0.1, N4090[0], "rtx4090", [gpu])
    t, wait = story(log, "A_2", config, 30.0)
    step = t.steps[-1]
    assert (step.pending_reason, step.slot_holders) == ("ArrayThrottle", ["A_0", "A_1"])
    en = render(wait, "en")
    assert "waiting for its array's %N: the tasks A_0, A_1 hold every slot the array may use at " \
        "once; the next of them to end lets it run (Q7)" in en  # fmt: skip
    no_event_names(en)
    log.end("A_0", 40.0, N4090[0], "rtx4090", [0], exit_code=0)
    log.promote("A_2", 40.1)
    t, wait = story(log, "A_2", config, 50.0)
    reasons = [s.pending_reason for s in t.steps]
    assert "ArrayThrottle" in reasons and reasons[-1] is None and t.steps[-1].rank == 1


def test_why_Q7_a_task_beyond_the_throttle_reads_ArrayThrottle_from_its_submit(
    config: Config,
) -> None:
    """An array `0-3%2`: at its submit, before intake's JobPromoted of A_0 and A_1 follow, task
    A_3 already waits for the array's %2 (the tasks about to take it), never ConcurrencyLimit."""
    log = Log()
    log.submit("A", "bcg-alice", "BCG", 0.0, array=JobArray(tasks=[0, 1, 2, 3], throttle=2,
                                                             spec="0-3%2"))  # fmt: skip
    t, _ = story(log, "A_3", config, 0.0)
    (first,) = t.steps
    assert first.cause is not None and first.cause.kind == "submitted"
    assert (first.pending_reason, first.slot_holders) == ("ArrayThrottle", ["A_0", "A_1"])
    for k in (0, 1):
        log.promote(f"A_{k}", 0.0)
    t, _ = story(log, "A_3", config, 10.0)
    assert {s.pending_reason for s in t.steps} == {"ArrayThrottle"}
    t, _ = story(log, "A_0", config, 10.0)  # promoted at once: it waited for nothing (S1)
    assert [s.pending_reason for s in t.steps if s.state == "PERSONAL_QUEUE_WAIT"] == [None]


def test_why_Q7_a_throttle_above_the_users_slots_reads_ConcurrencyLimit_at_submit(
    config: Config,
) -> None:
    """`0-4%4` with bcg-alice's 3 slots (Q5): the user's limit, not the %4, holds A_3 and A_4."""
    assert config.max_active_jobs == 3
    log = Log()
    log.submit("A", "bcg-alice", "BCG", 0.0, array=JobArray(tasks=[0, 1, 2, 3, 4], throttle=4,
                                                             spec="0-4%4"))  # fmt: skip
    for task in ("A_3", "A_4"):
        t, _ = story(log, task, config, 0.0)
        assert [s.pending_reason for s in t.steps] == ["ConcurrencyLimit"], task


@pytest.mark.parametrize("lang", ["en", "ko"])
def test_why_Q7_ArrayThrottle_at_submit_is_one_sentence_in_cli_and_console(
    config: Config, lang: str
) -> None:
    """The CLI (jpu.cli.why) and the console (why.js `whyReason`: the step's slot_holders
    joined by ", " into its why.reason.ArrayThrottle string, console.js `fill`) say the same
    sentence for the submit step of a throttled task."""
    log = Log()
    log.submit("A", "bcg-alice", "BCG", 0.0, array=JobArray(tasks=[0, 1, 2], throttle=1,
                                                             spec="0-2%1"))  # fmt: skip
    _, wait = story(log, "A_2", config, 0.0)
    step = wait["steps"][0]
    assert step["pending_reason"] == "ArrayThrottle"
    js_params = {"user": wait["user"], "jobs": ", ".join(step["slot_holders"])}
    template = _js_strings(lang)["why.reason.ArrayThrottle"]
    console = re.sub(r"\{(\w+)\}", lambda m: js_params.get(m.group(1), m.group(0)), template)
    assert "A_0" in console and "{" not in console
    assert console in render(wait, lang)
    js = WHY_JS.read_text()
    body = js[js.index("function whyReason") : js.index("function whyNodes")]
    assert 'tf("why.reason." + key, { user: w.user, jobs,' in body  # it fills {jobs} for it


def oom_story(config: Config) -> Log:
    """M (BCG) runs out of memory on a 12 GB rtx3080ti while OSL fills every rtx4090; its retry
    (min_vram_gb 13, X8) waits beside idle 3080 Ti; OSL's o5 enters ahead and takes one;
    maintenance comes and goes; o1's end frees the 4090 GPU it then runs on."""
    log = Log()
    for lab, v in (("BCG", 24_000.0), ("OSL", 0.0)):
        log.add(UsageCharged, ts=0.0, lab=lab, amount=v, value_after=v, as_of=0.0,
                reason="initial")  # fmt: skip
    for i, (node, g) in enumerate([(n, g) for n in N4090 for g in (0, 1)], start=1):
        log.submit(f"o{i}", "osl-erin", "OSL", 1.0)
        log.promote(f"o{i}", 1.0)
        log.run(f"o{i}", 1.1, node, "rtx4090", [g])
    log.submit("m", "bcg-alice", "BCG", 10.0)
    log.promote("m", 10.0)
    log.run("m", 10.1, "gpu-3080tix2-01", "rtx3080ti", [0])
    log.end("m", 70.0, "gpu-3080tix2-01", "rtx3080ti", [0], state="FAILED", exit_code=1,
            oom=True, reason="OOM")  # fmt: skip
    log.add(JobRetryScheduled, ts=70.1, job_id="m", attempt=2, min_vram_gb=13)
    log.submit("o5", "osl-frank", "OSL", 80.0)
    log.promote("o5", 80.0)  # OSL's usage (0) is below BCG's: ahead of M
    log.add(JobDispatched, ts=80.1, job_id="o5", attempt=1, node="gpu-3080tix2-01",
            tier="rtx3080ti", gpus=[0])  # fmt: skip
    log.add(MaintenanceChanged, ts=100.0, state="DRAINING", by="admin", message="kernel update")
    log.add(MaintenanceChanged, ts=200.0, state="NORMAL", by="admin")
    log.end("o1", 300.0, N4090[0], "rtx4090", [0], exit_code=0)
    log.add(JobDispatched, ts=300.1, job_id="m", attempt=2, node=N4090[0], tier="rtx4090",
            gpus=[0])  # fmt: skip
    log.add(JobStarted, ts=300.5, job_id="m", attempt=2, backend_job_id="b-m2")
    log.end("m", 400.0, N4090[0], "rtx4090", [0], attempt=2, exit_code=0)
    return log


def test_why_oom_retry_waits_for_MinVram_and_each_because_is_a_cause_D7_X8(
    config: Config,
) -> None:
    t, wait = story(oom_story(config), "m", config, 500.0)
    kinds = [s.cause.kind for s in t.steps if s.cause is not None]
    assert kinds == [
        "submitted", "promoted_free_slot", "dispatched", "started", "out_of_memory", "retried",
        "other_entered_ahead", "other_dispatched", "maintenance_draining", "maintenance_ended",
        "other_ended", "dispatched", "started", "completed",
    ]  # fmt: skip
    by_kind = {s.cause.kind: s for s in t.steps if s.cause is not None}
    retry = by_kind["retried"]
    assert (retry.pending_reason, retry.min_vram_gb) == ("MinVram", 13)  # not Resources (D7)
    assert by_kind["maintenance_ended"].pending_reason == "MinVram"
    dispatched = [s for s in t.steps if s.cause is not None and s.cause.kind == "dispatched"]
    assert dispatched[-1].cause is not None and dispatched[-1].cause.jobs == ["o1"]
    en = render(wait, "en")
    print(en)
    no_event_names(en)
    no_event_names(render(wait, "ko"))
    for sentence in (
        "because it ran out of GPU memory on rtx3080ti (12 GB) (X7)",
        "rank 1 of 1 — waits for a GPU with at least 13 GB; only smaller GPUs are idle (D7)\n"
        "      because it ran out of GPU memory on rtx3080ti (12 GB): retried on a GPU with at "
        "least 13 GB (X8)",
        "because job o5 (OSL) entered the global queue ahead of it: the lab with lower usage "
        "ranks first (D1)",
        "because job o5 (OSL) took GPU 0 on gpu-3080tix2-01",
        "because the admin admin started maintenance: \u201ckernel update\u201d: nothing new is "
        "dispatched (M1)",
        "because the admin admin ended maintenance: dispatching resumes",
        "because job o1 (OSL) ended, freeing GPU 0 on gpu-4090x2-01",
        "dispatched\n      because gpu-4090x2-01 (rtx4090) had GPU 0 free for it, freed by job o1",
        "running\n      because gpu-4090x2-01 started it",
        "completed\n      because its command exited with code 0",
    ):
        assert sentence in en, sentence
    for tautology in (
        "because it was dispatched",
        "because it entered the global queue",
        "because it started\n",
        "because it ended",
        "because maintenance changed",
    ):
        assert tautology not in en


def test_why_cancel_names_who_cancelled(config: Config) -> None:
    """Every GPU busy: C (KDG) waits behind B (OSL); B is cancelled in the queue and leaves it,
    then C's owner cancels C."""
    log = Log()
    for i, (node, g) in enumerate([(n, g) for n in N4090 for g in (0, 1)], start=1):
        log.submit(f"o{i}", "osl-erin", "OSL", 0.0, tiers=["rtx4090"])
        log.promote(f"o{i}", 0.0)
        log.run(f"o{i}", 0.1, node, "rtx4090", [g])
    log.submit("b", "osl-frank", "OSL", 1.0, n=2, tiers=["rtx4090"])
    log.promote("b", 1.0)
    log.submit("c", "kdg-carol", "KDG", 2.0, n=2, tiers=["rtx4090"])
    log.promote("c", 2.0)
    log.add(JobCancelRequested, ts=3.0, job_id="b", by="osl-frank")
    log.add(JobEnded, ts=3.1, job_id="b", attempt=1, state="CANCELLED")
    log.add(JobCancelRequested, ts=5.0, job_id="c", by="kdg-carol")
    t, wait = story(log, "c", config, 6.0)
    kinds = [s.cause.kind for s in t.steps if s.cause is not None]
    assert kinds[-2:] == ["other_cancelled", "cancel_requested"], kinds  # B left at its cancel
    en = render(wait, "en")
    assert "because osl-frank cancelled job b (OSL)" in en
    assert "because kdg-carol cancelled it" in en
    no_event_names(en)


# --- every sentence: both languages, the CLI and the console --------------------------------

SAMPLE = {  # what a cause of each kind carries (as jpu.explain.wait fills it)
    "job_id": "j2", "lab": "KDG", "jobs": ["j7"], "other_lab": "OSL", "user": "bcg-alice",
    "node": "n1", "tier": "rtx4090", "gpus": [0, 1], "count": 1, "needed": 2, "vram_gb": 12,
    "min_vram_gb": 13, "code": 3, "state": "DRAINING", "by": "admin", "message": "kernel update",
    "waited_s": 5.0,
}  # fmt: skip
REASONS = {  # kinds whose sentence depends on the reason, and a reason of each other kind
    "retry_declined": ["max_attempts", "no_fit"],
    "reservation_shrunk": ["lost", "yielded", "lent"],
    "other_released": ["demoted", "swap", "cancelled", "maintenance", "capacity"],
    "failed": ["NODE_FAIL"],
    "backfill_ended": ["preempted"],
}


def _cases() -> list[tuple[str, str | None]]:
    return [(k, r) for k in CAUSE_KINDS for r in REASONS.get(k, [None])]


@pytest.mark.parametrize(("kind", "reason"), _cases())
@pytest.mark.parametrize("lang", ["en", "ko"])
def test_why_every_cause_kind_is_a_sentence_never_an_event_type(
    kind: str, reason: str | None, lang: str
) -> None:
    cause = Cause(seq=1, at=0.0, event="JobEnded", kind=kind, reason=reason,  # type: ignore[arg-type]
                  **SAMPLE)  # fmt: skip
    step = {"seq": 1, "at": 0.0, "state": "GLOBAL_QUEUE_WAIT", "rank": 1, "pending_reason": None,
            "queue_length": 1, "lab_usage": 0.0, "ahead": [],
            "cause": msgspec.to_builtins(cause)}  # fmt: skip
    wait = {"job_id": "j1", "lab": "BCG", "user": "bcg-alice", "name": "j1", "state": "RUNNING",
            "phases": {}, "steps": [step], "reservations": []}  # fmt: skip
    text = render(wait, lang)
    line = next(x for x in text.splitlines() if x.strip().startswith(_T[lang]["because"].strip()))
    said = line.strip()[len(_T[lang]["because"].strip()) :].strip()
    assert said, (kind, reason)
    no_event_names(text)
    assert "{" not in said and "None" not in said and "()" not in said, said


def _js_strings(lang: str) -> dict[str, str]:
    """The console's `why.*` strings as why.js builds them from the one catalog: `why.k` for
    every key `k`, the catalog's `console.k` overriding it (the page's own layout)."""
    catalog = json.loads(CATALOG.read_text(encoding="utf-8"))[lang]
    out = {f"why.{k}": v for k, v in catalog.items() if not k.startswith("console.")}
    out.update({f"why.{k[8:]}": v for k, v in catalog.items() if k.startswith("console.")})
    return out


@pytest.mark.parametrize("lang", ["en", "ko"])
def test_why_the_console_says_every_cause_as_the_cli_does(lang: str) -> None:
    """why.js has the CLI's sentence for every kind (one wording; SPEC U4 in both places)."""
    js = _js_strings(lang)
    cli = {k: v for k, v in _T[lang].items() if k.startswith("cause.")}
    for kind in CAUSE_KINDS:
        assert any(k == f"cause.{kind}" or k.startswith(f"cause.{kind}.") for k in cli), kind
    for key, sentence in cli.items():
        assert js.get(f"why.{key}") == sentence, key
    shared = ("reason.ConcurrencyLimit", "reason.ConcurrencyLimit.none", "reason.MinVram",
              "reason.Dependency", "reason.Held", "reason.ArrayThrottle",
              "at_once", "after", "freed_by", "message", "usage")  # fmt: skip
    for key in shared:
        assert js.get(f"why.{key}") == _T[lang][key], key


def test_D7_jpu_queue_and_show_name_the_VRAM_floor() -> None:
    from jpu.cli.rest.jobviews import job, queue

    entry = {"rank": 1, "job_id": "m", "name": "m", "lab": "BCG", "user": "bcg-alice",
             "num_gpus": 1, "tiers": None, "min_vram_gb": 13, "state": "GLOBAL_QUEUE_WAIT",
             "attempt": 2, "lab_usage": 0.0, "pending_reason": "MinVram"}  # fmt: skip
    assert "(MinVram>=13GB)" in queue({"queue": [entry], "running": []})
    assert re.search(r"Reason\W+MinVram>=13GB", job({**entry, "id": "m"}))


def test_why_Q8_names_the_parent_and_how_it_ended(config: Config) -> None:
    """A job cancelled because its dependency can never be met: `jpu why` (and the console)
    name the parent and how it ended, not just "a job it depends on"."""
    log = Log()
    log.submit("p", "bcg-alice", "BCG", 0.0, tiers=["rtx4090"])
    log.promote("p", 0.0)
    log.run("p", 0.1, N4090[0], "rtx4090", [0])
    log.submit("c", "bcg-alice", "BCG", 1.0, dependency="afterok:p")
    log.end("p", 5.0, N4090[0], "rtx4090", [0], state="FAILED", exit_code=1)
    log.add(JobEnded, ts=5.1, job_id="c", attempt=0, state="CANCELLED",
            reason="DEPENDENCY_NEVER_SATISFIED")  # fmt: skip
    t, wait = story(log, "c", config, 6.0)
    last = t.steps[-1].cause
    assert last is not None and last.kind == "dependency_never_satisfied", t.steps
    assert (last.jobs, last.state) == (["p"], "FAILED")
    en = render(wait, "en")
    assert "because job p it depends on ended FAILED, so its dependency can never be met" in en
    assert "p이(가) FAILED(으)로 끝나" in render(wait, "ko")
