"""SPEC U6 decided at intake for every submit, whoever the client: `POST /v1/jobs` with the
sbatch options as the user gave them (`sbatch`) over the real gateway, intake and projections
on NATS JetStream + PostgreSQL. The site-bookkeeping warnings are intake's (in the 201, on
JobSubmitted and in the job's view), the honoured options become the job's fields, the refused
ones (and, with `sbatch_compat: strict`, the bookkeeping) are a 422 naming the option and its
line with nothing appended, and a body's own `sbatch_warnings` is refused."""

from __future__ import annotations

from typing import Any

import msgspec

from jpu.bus import EventBus
from jpu.config import load_config
from jpu.events import JobSubmitted
from jpu.runtime.clock import FakeClock
from jpu.testing.api import Api, assert_error, bearer, job_body
from jpu.testing.intake import BODY, running, submit, wait_subscribed
from jpu_services.intake.service import run_intake

QOS_LINE = "run.sh:3: #SBATCH --qos=high"
QOS_WARNING = f"{QOS_LINE}: accepted and ignored: no QOS here"


def _sbatch(*options: tuple[str, str | None, str | None]) -> dict[str, Any]:
    return {
        "source": "run.sh",
        "options": [{"option": o, "value": v, "source_line": line} for o, v, line in options],
    }


async def _submitted(bus: EventBus) -> list[JobSubmitted]:
    return [d.event async for d in bus.replay() if isinstance(d.event, JobSubmitted)]


async def test_U6_a_raw_api_submit_with_a_bookkeeping_option_is_warned_by_intake(api: Api) -> None:
    body = job_body(sbatch=_sbatch(("--qos", "high", QOS_LINE), ("--mem", "30G", None)))
    r = await api.submit("alice", body)
    assert r.status_code == 201, r.text
    job = r.json()
    (said,) = job["warnings"]  # the 201 answers intake's decision, one line per option
    assert said["field"] == "sbatch" and said["message"].startswith(QOS_WARNING), said
    assert job["tiers"] == ["rtx4090"]  # --mem=30G: only the tier bringing 32 GB per GPU
    (event,) = await _submitted(api.bus)
    assert event.sbatch_warnings == [said["message"]]  # kept on the job, replayed as any event
    shown = (await api.client.get(f"/v1/jobs/{job['id']}", headers=bearer("alice"))).json()
    assert shown["sbatch_warnings"] == [said["message"]]


async def test_U6_a_client_that_names_no_line_is_named_by_its_option(api: Api) -> None:
    r = await api.submit("alice", job_body(sbatch={"options": [{"option": "-x", "value": "n1"}]}))
    assert r.status_code == 201, r.text
    assert [w["message"].split(": accepted")[0] for w in r.json()["warnings"]] == ["sbatch -x=n1"]


async def test_U6_a_refused_option_via_the_api_names_the_option_and_line(api: Api) -> None:
    body = job_body(sbatch=_sbatch(("--uid", "0", "run.sh:2: #SBATCH --uid=0")))
    err = assert_error(await api.submit("alice", body), 422, "VALIDATION_ERROR")
    assert err["details"]["field"] == "sbatch"
    assert err["details"]["problems"] == [
        "run.sh:2: #SBATCH --uid=0: a job runs as its submitter's account (SPEC X4); delete the "
        "line (or write ##SBATCH to keep it as a comment)"
    ]
    err = assert_error(
        await api.submit("alice", job_body(sbatch=_sbatch(("-N", "2", None)))),
        422,
        "VALIDATION_ERROR",
    )
    (nodes,) = err["details"]["problems"]  # impossible here: refused, with the fix
    assert nodes.startswith("sbatch -N=2: a job runs on one node") and "use -N 1" in nodes
    assert await _submitted(api.bus) == []  # nothing appended


async def test_U6_a_forged_sbatch_warnings_in_the_body_is_refused(api: Api) -> None:
    for forged in ([], ["nothing to see"]):
        err = assert_error(
            await api.submit("alice", job_body(sbatch_warnings=forged)), 422, "VALIDATION_ERROR"
        )
        assert err["details"]["field"] == "sbatch_warnings", err
        assert "set by the platform" in err["message"]
    malformed = job_body(sbatch={"options": [{"option": "--qos", "line": 3}]})
    err = assert_error(await api.submit("alice", malformed), 422, "VALIDATION_ERROR")
    assert err["details"]["field"] == "sbatch"
    assert await _submitted(api.bus) == []


async def test_U6_strict_compat_refuses_the_bookkeeping_at_intake(bus: EventBus) -> None:
    """`sbatch_compat: strict` (the site's config): the same body that is warned elsewhere is
    refused by intake, naming the option and its line (the gateway forwards the body untouched
    and answers intake's 422 as is, as the tests above show for a refused option)."""
    strict = msgspec.structs.replace(load_config(env={}), sbatch_compat="strict")
    async with running(run_intake, bus, strict, FakeClock(10.0)):
        await wait_subscribed(bus)
        reply = await submit(bus, {**BODY, "sbatch": _sbatch(("--qos", "high", QOS_LINE))})
        assert reply.status == 422 and reply.error is not None, reply
        assert reply.error.details["field"] == "sbatch"
        (problem,) = reply.error.details["problems"]
        assert problem.startswith(QOS_WARNING) and "sbatch_compat: strict" in problem
        honoured = await submit(bus, {**BODY, "sbatch": _sbatch(("-c", "4", "run.sh:2: -c 4"))})
        assert honoured.status == 201 and honoured.warnings == [], honoured
    assert [e.job_id for e in await _submitted(bus)] == [honoured.job_id]
