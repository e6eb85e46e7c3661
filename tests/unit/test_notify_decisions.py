"""SPEC Q10: what the notifier owes for each event (jpu.domain.notify) and which requests are
refused (jpu.policy.mail, jpu.domain.validation.validate_submit). Pure: events in, notifications
out."""

from __future__ import annotations

from jpu.domain.notify import NotifyState, job_link, step
from jpu.domain.validation import validate_submit
from jpu.events import (
    Event,
    JobArray,
    JobCancelRequested,
    JobEnded,
    JobRetryDeclined,
    JobRetryScheduled,
    JobStarted,
    JobSubmitted,
    NotificationSettingsChanged,
    UsageCharged,
)
from jpu.policy import mail

URL = "http://gw.example:8080"


def _submitted(job: str = "j1", **kw: object) -> JobSubmitted:
    return JobSubmitted(
        event_id=f"sub-{job}", ts=0.0, job_id=job, lab="lab-a", user="alice", name="train",
        command="true", num_gpus=1, **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def _run(events: list[Event]) -> list[tuple[str, str, str, str]]:
    state = NotifyState()
    out = []
    for seq, e in enumerate(events, 1):
        out += [(n.kind, n.channel, n.recipient, n.text) for n in step(state, seq, e, URL)]
    return out


def _ended(attempt: int, state: str, ts: float, **kw: object) -> JobEnded:
    return JobEnded(
        event_id=f"end-{attempt}", ts=ts, job_id="j1", attempt=attempt, state=state,  # type: ignore[arg-type]
        **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def test_end_sentence_names_state_exit_runtime_charge_and_link_Q10() -> None:
    got = _run([
        _submitted(mail_type=["END"], mail_user="a@lab.example"),
        JobStarted(event_id="s1", ts=100.0, job_id="j1", attempt=1, backend_job_id="b"),
        _ended(1, "COMPLETED", 100.0 + 3723, exit_code=0, usage=297_360.0),
    ])  # fmt: skip
    assert got == [
        (
            "END", "email", "a@lab.example",
            "Job j1 (train) ended COMPLETED with exit code 0 after 1h 02m 03s on attempt 1, "
            f"charged 297,360 TFLOP-s: {job_link(URL, 'j1')}",
        )
    ]  # fmt: skip


def test_fail_once_for_end_and_fail_and_user_defaults_with_webhook_Q10() -> None:
    settings = NotificationSettingsChanged(
        event_id="ns", ts=0.0, user="alice", email="alice@lab.example",
        webhook_url="http://hooks.example/x", mail_type=["END", "FAIL"],
    )  # fmt: skip
    got = _run([
        settings, _submitted(),
        JobStarted(event_id="s1", ts=10.0, job_id="j1", attempt=1, backend_job_id="b"),
        _ended(1, "FAILED", 15.0, exit_code=3, reason="NonZeroExitCode", usage=5.0),
    ])  # fmt: skip
    assert [(k, c, r) for k, c, r, _ in got] == [
        ("FAIL", "email", "alice@lab.example"),
        ("FAIL", "webhook", "http://hooks.example/x"),
    ]
    assert "ended FAILED with exit code 3 (NonZeroExitCode) after 5s" in got[0][3]


def test_oom_retry_is_a_requeue_then_the_end_counts_it_Q10_X8() -> None:
    got = _run([
        _submitted(mail_type=list(mail.KINDS), mail_user="a@lab.example"),
        JobStarted(event_id="s1", ts=0.0, job_id="j1", attempt=1, backend_job_id="b"),
        _ended(1, "FAILED", 60.0, oom=True, reason="OOM", usage=100.0),
        JobRetryScheduled(event_id="r", ts=61.0, job_id="j1", attempt=2, min_vram_gb=48),
        JobStarted(event_id="s2", ts=70.0, job_id="j1", attempt=2, backend_job_id="c"),
        _ended(2, "COMPLETED", 80.0, exit_code=0, usage=50.0),
    ])  # fmt: skip
    assert [k for k, *_ in got] == ["BEGIN", "REQUEUE", "BEGIN", "END"]
    assert "ran out of GPU memory on attempt 1 and was requeued as attempt 2" in got[1][3]
    assert "charged 100 TFLOP-s so far" in got[1][3]
    assert "(retried once after running out of GPU memory), charged 150 TFLOP-s" in got[3][3]


def test_oom_declined_or_cancelled_is_the_fail_Q10_X8() -> None:
    for decision in (
        JobRetryDeclined(
            event_id="d", ts=61.0, job_id="j1", attempt=1, reason="no_fit", needed_vram_gb=99
        ),
        JobCancelRequested(event_id="d", ts=61.0, job_id="j1", by="alice"),
    ):
        got = _run([
            _submitted(mail_type=["FAIL"], mail_user="a@lab.example"),
            _ended(1, "FAILED", 60.0, oom=True, reason="OOM", usage=1.0),
            decision,
        ])  # fmt: skip
        assert [k for k, *_ in got] == ["FAIL"]
        assert "ended FAILED (OOM) without running on attempt 1" in got[0][3]


def test_reservation_charge_counts_but_job_end_charge_not_twice_F4_Q10() -> None:
    got = _run([
        _submitted(mail_type=["END"], mail_user="a@lab.example"),
        UsageCharged(event_id="c0", ts=1.0, lab="lab-a", amount=7.0, value_after=7.0, as_of=1.0,
                     job_id="j1", reason="demoted"),
        _ended(1, "COMPLETED", 5.0, exit_code=0, usage=3.0),
        UsageCharged(event_id="c1", ts=6.0, lab="lab-a", amount=3.0, value_after=10.0, as_of=6.0,
                     job_id="j1", reason="job_end"),
    ])  # fmt: skip
    assert "charged 10 TFLOP-s" in got[0][3]


def test_no_kinds_no_address_nothing_sent_Q10() -> None:
    assert _run([_submitted(), _ended(1, "COMPLETED", 1.0)]) == []  # no defaults: NONE
    assert _run([_submitted(mail_type=["END"]), _ended(1, "COMPLETED", 1.0)]) == []  # nowhere
    assert _run([_submitted(mail_type=[], mail_user="a@b.example")]) == []


def test_mail_type_refusals_name_the_field_Q10() -> None:
    assert mail.parse_kinds("end,FAIL") == (["END", "FAIL"], None)
    assert mail.parse_kinds(["ALL"]) == (["BEGIN", "END", "FAIL", "REQUEUE"], None)
    assert mail.parse_kinds("NONE") == ([], None)
    assert mail.parse_kinds("END,array_tasks") == (["END", "ARRAY_TASKS"], None)
    for bad in ("END,SOMETIMES", 3, "NONE,END", ["END", 1]):
        assert mail.parse_kinds(bad)[1] is not None
    body = {"command": "true", "num_gpus": 1, "mail_type": "SOMETIMES", "mail_user": "nobody"}
    assert {e.field for e in validate_submit(body, ["t"])} == {"mail_type", "mail_user"}
    assert mail.webhook_problem("ftp://x.example/") is not None
    assert mail.webhook_problem("http://:99999/") is not None
    assert mail.webhook_problem("https://hooks.slack.com/services/T/B/x") is None


def _array(kinds: list[str], tasks: int = 3) -> list[Event]:
    spec = JobArray(tasks=list(range(tasks)), spec=f"0-{tasks - 1}%2")
    return [_submitted("A", mail_type=kinds, mail_user="a@lab.example", array=spec)]


def _task_run(k: int, t0: float, state: str, usage: float, **kw: object) -> list[Event]:
    job = f"A_{k}"
    return [
        JobStarted(event_id=f"s{k}", ts=t0, job_id=job, attempt=1, backend_job_id="b"),
        JobEnded(event_id=f"e{k}", ts=t0 + 10, job_id=job, attempt=1, state=state,  # type: ignore[arg-type]
                 usage=usage, **kw),  # type: ignore[arg-type]
    ]  # fmt: skip


def test_an_array_notifies_once_begin_at_first_start_end_at_last_end_Q10_Q7() -> None:
    got = _run([
        *_array(["BEGIN", "END", "FAIL", "REQUEUE"]),
        *_task_run(1, 100.0, "COMPLETED", 10.0, exit_code=0),
        *_task_run(0, 105.0, "FAILED", 20.0, exit_code=1, reason="NonZeroExitCode"),
        JobEnded(event_id="e2", ts=120.0, job_id="A_2", attempt=1, state="CANCELLED",
                 reason="CancelledByUser"),
    ])  # fmt: skip
    assert got == [
        ("BEGIN", "email", "a@lab.example",
         f"Array A (train) started: task A_1 is the first of its 3 tasks to run: {URL}/#/job/A"),
        ("FAIL", "email", "a@lab.example",
         "Array A (train) ended: 1 COMPLETED, 1 FAILED, 1 CANCELLED of 3 tasks in 20s from first "
         f"start to last end, charged 30 TFLOP-s: {URL}/#/job/A"),
    ]  # fmt: skip


def test_an_array_counts_its_tasks_oom_retries_in_its_one_end_Q10_X8() -> None:
    got = _run([
        *_array(["END", "REQUEUE"], tasks=2),
        *_task_run(0, 0.0, "FAILED", 5.0, oom=True, reason="OOM"),
        JobRetryScheduled(event_id="r", ts=11.0, job_id="A_0", attempt=2, min_vram_gb=48),
        JobEnded(event_id="e0b", ts=30.0, job_id="A_0", attempt=2, state="COMPLETED", usage=7.0),
        *_task_run(1, 40.0, "COMPLETED", 1.0),
    ])  # fmt: skip
    assert [(k, t) for k, _, _, t in got] == [
        ("END", "Array A (train) ended: 2 COMPLETED of 2 tasks in 50s from first start to last "
         f"end, 1 OOM retry (X8), charged 13 TFLOP-s: {URL}/#/job/A"),
    ]  # fmt: skip


def test_array_tasks_asks_every_task_to_notify_as_a_job_Q10() -> None:
    runs = [*_task_run(0, 0.0, "COMPLETED", 1.0), *_task_run(1, 0.0, "COMPLETED", 1.0)]
    got = _run([*_array(["END", "ARRAY_TASKS"], tasks=2), *runs])
    assert [(k, t.split(" ended")[0]) for k, _, _, t in got] == [
        ("END", "Job A_0 (train)"), ("END", "Job A_1 (train)"),
    ]  # fmt: skip


def test_an_array_never_started_ends_once_without_running_Q10() -> None:
    cancel = [JobEnded(event_id=f"e{k}", ts=5.0, job_id=f"A_{k}", attempt=1, state="CANCELLED",
                       reason="DEPENDENCY_NEVER_SATISFIED") for k in range(3)]  # fmt: skip
    got = _run([*_array(["BEGIN", "END"]), *cancel])
    assert [(k, t) for k, _, _, t in got] == [
        ("END", "Array A (train) ended: 3 CANCELLED of 3 tasks without running, charged 0 "
         f"TFLOP-s: {URL}/#/job/A"),
    ]  # fmt: skip


def test_Q10_an_address_on_a_site_without_smtp_is_a_warning_not_silence() -> None:
    from jpu.config import load_config
    from jpu.policy.sbatch import Site, unsent_mail

    tiers = list(load_config().tiers)
    without, with_smtp = Site(tiers=tiers, mail=False), Site(tiers=tiers, mail=True)
    where = "train.sh:3: #SBATCH --mail-user=me@lab.example"
    said = unsent_mail(without, "me@lab.example", where)
    assert said is not None and said.startswith(f"{where}: this site sends no e-mail ")
    assert "none will reach me@lab.example" in said
    assert unsent_mail(with_smtp, "me@lab.example", where) is None
    assert unsent_mail(without, None, where) is None  # no address: the user's defaults decide
