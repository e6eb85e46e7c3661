"""Explanations through HTTP on real NATS JetStream + PostgreSQL (SPEC U4):
`GET /v1/jobs/{id}/wait`, `GET /v1/admin/labs/{lab}/usage-explain`, `GET /v1/admin/usage-statement`
and `GET /v1/queue?at=` on SPEC R3's worked example, driven live by the real dispatcher and
accounting services (the gateway app of test_api_support; the test acts as intake and agent).

The example: BCG 24,000 / KDG 28,000 TFLOP-s. Y (BCG, bob) runs on one GPU of gpu-4090x2-02,
X (BCG, alice, 2 GPUs) is rank 1 and reserves the other; K (KDG, carol, 2 GPUs) waits behind.
Five minutes later Y ends (8,000 TFLOP-s): BCG 32,000 > KDG 28,000, the next cycle demotes X
(R3: 1 × 300 × 82.6 = 24,780 at once) and K dispatches. K ends, X runs 600 s and ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator

import msgspec
import pytest

from jpu.bus import history
from jpu.bus.snapshots import SnapshotStore
from jpu.config import Config
from jpu.domain.cluster import ClusterState, evolve
from jpu.domain.codec import pack
from jpu.events import UsageCharged
from jpu.policy.fairshare import decayed
from jpu.policy.model import LabUsage
from jpu.store.projection import wait_applied
from jpu.testing.api import Api, add_lab_admins, assert_error, bearer
from jpu.testing.cli import jpu, ok
from jpu.testing.fold import Watcher, end_job, start_job, submit_global
from jpu_services.accounting.service import run_accounting
from jpu_services.dispatcher.service import run_dispatcher

TFLOPS = 82.6
HALF_LIFE = 7 * 24 * 3600.0


@contextlib.asynccontextmanager
async def services(api: Api, config: Config) -> AsyncIterator[None]:
    stop = asyncio.Event()
    tasks = [
        asyncio.create_task(run_dispatcher(api.bus, config, api.clock, stop)),
        asyncio.create_task(run_accounting(api.bus, config, api.clock, stop)),
    ]
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 15)


class Example(msgspec.Struct):
    x: str
    y: str
    k: str
    x_submit_seq: int
    reserving_at: float  # a moment while X held its reservation


async def r3_live(api: Api) -> Example:
    config = msgspec.structs.replace(api.config, cycle_s=0.5, min_cycle_gap_s=0.02)
    clock, bus = api.clock, api.bus
    for lab, v in (("BCG", 24_000.0), ("KDG", 28_000.0)):
        await bus.append(
            UsageCharged(event_id=f"init-{lab}", ts=clock.now(), lab=lab, amount=v,
                         value_after=v, as_of=clock.now(), reason="initial")
        )  # fmt: skip
    g = ["rtx4090"]
    async with Watcher(bus, config) as w, services(api, config):
        fill = ["fill-1", "fill-2"]  # OSL holds gpu-4090x2-01 (best fit, D4)
        for f in fill:
            await submit_global(bus, clock, f, "OSL", "osl-erin", 1, tiers=g)
            await w.until(lambda s, f=f: s.jobs[f].placement)
            await start_job(bus, w.state, clock, f)
            await w.until(lambda s, f=f: s.jobs[f].state == "RUNNING")
        y, x, k = "job-y", "job-x", "job-k"
        await submit_global(bus, clock, y, "BCG", "bcg-bob", 1, tiers=g)
        await w.until(lambda s: s.jobs[y].placement)
        assert w.state.jobs[y].placement[0] == "gpu-4090x2-02"
        await start_job(bus, w.state, clock, y)
        clock.advance(10)
        x_submit_seq = await submit_global(bus, clock, x, "BCG", "bcg-alice", 2, tiers=g) - 1
        await w.until(lambda s: s.jobs[x].state == "RESERVING")  # T+0: rank 1 reserves 1 of 2
        await submit_global(bus, clock, k, "KDG", "kdg-carol", 2, tiers=g)
        await w.ranked([k])  # a cycle decided on K (a positive signal, not a pause)
        assert w.state.jobs[k].state == "GLOBAL_QUEUE_WAIT"
        reserving_at = clock.now()
        clock.advance(300)  # T+5min: Y ends, its 8,000 TFLOP-s bring BCG to 32,000 > 28,000
        await w.until(lambda s: s.jobs[y].state == "RUNNING")
        await end_job(bus, w.state, config, clock, y, usage=8_000.0)
        await w.until(lambda s: s.jobs[k].placement)  # X demoted (R3), K dispatched
        assert w.state.jobs[x].state == "GLOBAL_QUEUE_WAIT"
        await start_job(bus, w.state, clock, k)
        await w.until(lambda s: s.jobs[k].state == "RUNNING")
        clock.advance(100)
        await end_job(bus, w.state, config, clock, k)
        await w.until(lambda s: s.jobs[x].placement)
        await start_job(bus, w.state, clock, x)
        await w.until(lambda s: s.jobs[x].state == "RUNNING")
        clock.advance(600)
        await end_job(bus, w.state, config, clock, x)  # 2 × 600 s run, its reservation paid
        await w.until(lambda s: sum(1 for c in s.charged_ids if c.startswith("chg-")) == 4)
        await wait_applied(api.pool, "lab_usage", w.state.lab_seq["BCG"], timeout=15)
    return Example(x, y, k, x_submit_seq, reserving_at)


async def test_U4_R3_wait_names_Ys_charge_that_demoted_X_and_its_phases(api: Api) -> None:
    ex = await r3_live(api)
    r = await api.client.get(f"/v1/jobs/{ex.x}/wait", headers=bearer("alice"))
    assert r.status_code == 200, r.text
    wait = r.json()
    (res,) = wait["reservations"]
    assert (res["reason"], res["charged_now"], res["node"]) == ("demoted", True, "gpu-4090x2-02")
    assert res["gpu_seconds"] == 300.0
    assert res["cost"] == pytest.approx(24_780.0, abs=1e-6)  # 1 × 300 × 82.6, to the TFLOP-s
    # what demoted it: Y's end, charging BCG (X's own lab) 8,000 → 32,000, above KDG's 28,000
    by = res["demoted_by"]
    assert (by["event"], by["job_id"], by["lab"], by["charge"]) == (
        "JobEnded",
        ex.y,
        "BCG",
        8_000.0,
    )
    decay = 0.5 ** (310 / HALF_LIFE)  # F3: the starting usage decayed from T0 to Y's end
    assert by["lab_usage"] == pytest.approx(24_000 * decay + 8_000, rel=1e-12)
    assert (res["overtaken_by"], res["overtaken_by_lab"]) == (ex.k, "KDG")
    assert res["overtaken_by_usage"] == pytest.approx(28_000 * decay, rel=1e-12)
    assert by["lab_usage"] > res["overtaken_by_usage"]
    seen = [(s["state"], s["rank"], s["pending_reason"]) for s in wait["steps"]]
    assert ("RESERVING", 1, "Reservation") in seen and ("RESERVING", 2, "Priority") in seen
    assert seen[-1] == ("COMPLETED", None, None)
    assert wait["phases"]["reserving"] == pytest.approx(300.0)
    assert wait["phases"]["global_queue"] == pytest.approx(100.0)  # K ran 100 s ahead of it
    assert wait["phases"]["running"] == pytest.approx(600.0)
    assert wait["terminal"] is True
    # the same answer from a snapshot taken before X's submission as from seq 1 (SPEC O6)
    state = ClusterState.new(api.config, keep_ended=False)
    async for d in api.bus.replay():
        if d.seq >= ex.x_submit_seq:
            break
        evolve(state, d)
    await SnapshotStore(api.bus.js, api.bus.stream).put(pack(state, api.bus.stream, 0.0), state.seq)
    start = await history.start_state(api.bus, api.config, ex.x_submit_seq - 1)
    assert start.seq == state.seq > 0
    from_snapshot = await history.read_wait(api.bus, api.config, ex.x, api.clock.now())
    no_snapshots = msgspec.structs.replace(api.config, snapshots=False)
    from_seq_1 = await history.read_wait(api.bus, no_snapshots, ex.x, api.clock.now())
    assert msgspec.to_builtins(from_snapshot) == msgspec.to_builtins(from_seq_1) == wait

    # same access as the job (SPEC §8): another lab's user, a lab member who is not the owner
    for who in ("carol", "bob"):
        assert_error(
            await api.client.get(f"/v1/jobs/{ex.x}/wait", headers=bearer(who)), 403, "FORBIDDEN"
        )
    assert (await api.client.get(f"/v1/jobs/{ex.x}/wait", headers=bearer("admin"))).json() == wait
    assert_error(
        await api.client.get("/v1/jobs/nope/wait", headers=bearer("alice")), 404, "NOT_FOUND"
    )
    assert_error(await api.client.get(f"/v1/jobs/{ex.x}/wait"), 401, "UNAUTHENTICATED")


async def test_F5_explain_usage_sums_to_the_labs_usage_and_the_statement(api: Api) -> None:
    ex = await r3_live(api)
    url = "/v1/admin/labs/BCG/usage-explain"
    assert_error(await api.client.get(url, headers=bearer("alice")), 403, "FORBIDDEN")
    r = await api.client.get(url, headers=bearer("admin"))
    assert r.status_code == 200, r.text
    x = r.json()
    rows = [(c["kind"], c["reason"], c["job_id"], c["user"], c["attempt"]) for c in x["charges"]]
    assert rows == [
        ("initial", "initial", None, None, None),
        ("run", "job_end", ex.y, "bcg-bob", 1),  # Y's run
        ("reservation", "demoted", ex.x, "bcg-alice", 1),  # X's reservation, R3 at release
        ("run", "job_end", ex.x, "bcg-alice", 1),  # X's run (its reservation already paid)
    ]
    _, y_run, x_res, x_run = x["charges"]
    assert y_run["amount"] == 8_000.0
    assert x_res["amount"] == pytest.approx(24_780.0, abs=1e-6)
    assert x_res["held"] == [
        {"what": "reservation", "tier": "rtx4090", "gpu_seconds": 300.0, "tflops": TFLOPS}
    ]
    assert x_run["amount"] == pytest.approx(2 * 600 * TFLOPS)
    assert [(h["what"], h["gpu_seconds"]) for h in x_run["held"]] == [("run", 1200.0)]
    for c in x["charges"]:
        assert c["value_now"] == decayed(LabUsage(c["amount"], c["at"]), x["at"], HALF_LIFE)
    # the sums reproduce GET /v1/labs/BCG to the TFLOP-s (F5)
    lab = (await api.client.get("/v1/labs/BCG", headers=bearer("alice"))).json()
    assert x["usage"] == lab["usage"] and x["raw_value"] == lab["raw_value"]
    assert sum(c["value_now"] for c in x["charges"]) == pytest.approx(lab["usage"], abs=1e-6)
    assert x["total_value"] == pytest.approx(lab["usage"], abs=1e-6)
    at_last = [
        decayed(LabUsage(c["amount"], c["at"]), lab["as_of"], HALF_LIFE) for c in x["charges"]
    ]
    assert lab["raw_value"] == pytest.approx(sum(at_last), abs=1e-6)  # F3, charge by charge
    # a period: only Y's run and X's R3 charge fall before X ran
    r = await api.client.get(url, params={"until": ex.reserving_at + 301}, headers=bearer("admin"))
    assert [c["reason"] for c in r.json()["charges"]] == ["initial", "job_end", "demoted"]
    bad = await api.client.get(url, params={"since": 10, "until": 5}, headers=bearer("admin"))
    assert_error(bad, 422, "VALIDATION_ERROR")

    s = (await api.client.get("/v1/admin/usage-statement", headers=bearer("admin"))).json()
    by = {row["lab"]: row for row in s["labs"]}
    assert by["BCG"]["tflop_s"] == pytest.approx(8_000 + 24_780 + 1200 * TFLOPS)
    assert by["BCG"]["initial_tflop_s"] == 24_000.0
    assert by["BCG"]["reserved_gpu_hours"] == pytest.approx(300 / 3600)
    assert (by["BCG"]["jobs"], by["KDG"]["jobs"]) == (2, 1)
    assert sum(row["share"] for row in s["labs"]) == pytest.approx(1.0)
    assert_error(
        await api.client.get("/v1/admin/usage-statement", headers=bearer("carol")), 403, "FORBIDDEN"
    )


async def test_F5_lab_members_see_their_own_labs_charges_admins_every_labs(
    api: Api,
    server: str,
) -> None:
    """A lab member could not see why the lab was charged (admin-only, or database access):
    `GET /v1/labs/{lab}/usage/explain` is for the lab's users and lab_admins and for admins,
    the same answer as the admin route (one explain module), 403 to other labs' members; the
    CLI's `jpu usage --explain` prints it."""
    ex = await r3_live(api)
    await add_lab_admins(api.bus, api.pool, api.clock.now())
    url = "/v1/labs/BCG/usage/explain"
    admin_view = await api.client.get("/v1/admin/labs/BCG/usage-explain", headers=bearer("admin"))
    for who in ("bob", "alice", "admin"):  # BCG's members (bob owns none of X's charges)
        r = await api.client.get(url, headers=bearer(who))
        assert r.status_code == 200, r.text
        assert r.json() == admin_view.json()
    mine = r.json()
    assert [c["job_id"] for c in mine["charges"]] == [None, ex.y, ex.x, ex.x]
    lab = (await api.client.get("/v1/labs/BCG", headers=bearer("bob"))).json()
    assert mine["total_value"] == pytest.approx(lab["usage"], abs=1e-6)  # F5
    for who in ("carol", "kdg-lead"):  # another lab's user and lab_admin
        err = assert_error(await api.client.get(url, headers=bearer(who)), 403, "FORBIDDEN")
        assert err["details"] == {"lab": "BCG", "your_lab": "KDG"}
    kdg = await api.client.get("/v1/labs/KDG/usage/explain", headers=bearer("kdg-lead"))
    assert [c["job_id"] for c in kdg.json()["charges"]] == [None, ex.k]
    assert (await api.client.get("/v1/labs/KDG/usage/explain", headers=bearer("admin"))).json()[
        "charges"
    ] == kdg.json()["charges"]
    period = {"until": ex.reserving_at + 301}
    r = await api.client.get(url, params=period, headers=bearer("bob"))
    assert [c["reason"] for c in r.json()["charges"]] == ["initial", "job_end", "demoted"]
    bad = await api.client.get(url, params={"since": 10, "until": 5}, headers=bearer("bob"))
    assert_error(bad, 422, "VALIDATION_ERROR")
    assert_error(await api.client.get(url), 401, "UNAUTHENTICATED")

    # the CLI, as a member runs it: their own lab by default, the table jpu-admin prints
    out = ok(await jpu(server, "bob", "usage", "--explain"))
    assert out.startswith("BCG: usage ") and "reservation (R3, at release)" in out
    assert f"= its usage {mine['usage']:,.3f} (F5)" in out and ex.x in out and ex.y in out
    assert (
        json.loads(ok(await jpu(server, "bob", "usage", "--explain", "--json")))["charges"]
        == mine["charges"]
    )
    until = str(ex.reserving_at + 301)  # a period, as for jpu-admin (epoch or ISO 8601)
    assert "listed: 3 charge(s)" in ok(
        await jpu(server, "bob", "usage", "--explain", "--until", until)
    )
    rc, out, err = await jpu(server, "bob", "usage", "--until", until)
    assert rc == 1 and "--since and --until go with --explain" in err, (rc, out, err)
    rc, out, err = await jpu(server, "carol", "usage", "--explain", "BCG")
    assert rc == 1 and "FORBIDDEN" in err and "members of BCG" in err, (rc, out, err)
    kdg_out = ok(await jpu(server, "admin", "usage", "--explain", "KDG"))
    assert kdg_out.startswith("KDG: usage ") and ex.k in kdg_out


async def test_D1_D7_queue_at_a_past_moment_for_admins_only(api: Api) -> None:
    ex = await r3_live(api)
    at = ex.reserving_at
    assert_error(
        await api.client.get("/v1/queue", params={"at": at}, headers=bearer("alice")),
        403,
        "FORBIDDEN",
    )
    r = await api.client.get("/v1/queue", params={"at": at}, headers=bearer("admin"))
    assert r.status_code == 200, r.text
    q = r.json()
    assert q["at"] == at
    assert [(e["rank"], e["job_id"], e["state"], e["pending_reason"]) for e in q["queue"]] == [
        (1, ex.x, "RESERVING", "Reservation"),
        (2, ex.k, "GLOBAL_QUEUE_WAIT", "Resources"),
    ]
    assert q["queue"][0]["reservation"]["node"] == "gpu-4090x2-02"
    assert {e["job_id"] for e in q["running"]} == {"fill-1", "fill-2", ex.y}
    kdg = q["queue"][1]["lab_usage"]
    assert kdg == pytest.approx(28_000.0, rel=1e-4)
    only_k = await api.client.get(
        "/v1/queue", params={"at": at, "lab": "KDG"}, headers=bearer("admin")
    )
    assert [e["job_id"] for e in only_k.json()["queue"]] == [ex.k]
    future = await api.client.get(
        "/v1/queue", params={"at": api.clock.now() + 3600}, headers=bearer("admin")
    )
    assert_error(future, 422, "VALIDATION_ERROR")
    # from a snapshot whose last event is not after `at` (and not from a later one): the same
    state = ClusterState.new(api.config, keep_ended=False)
    async for d in api.bus.replay(until_ts=at):
        if d.seq > ex.x_submit_seq:
            break
        evolve(state, d)
    store = SnapshotStore(api.bus.js, api.bus.stream)
    await store.put(pack(state, api.bus.stream, 0.0), state.seq)
    later = ClusterState.new(api.config, keep_ended=False)
    async for d in api.bus.replay():
        evolve(later, d)
    await store.put(pack(later, api.bus.stream, 0.0), later.seq)  # after `at`: not usable
    assert (
        await history._event_ts(api.bus, state.seq)
        <= at
        < await history._event_ts(api.bus, later.seq)
    )
    from_snapshot = await history.read_queue_at(api.bus, api.config, at)
    no_snapshots = msgspec.structs.replace(api.config, snapshots=False)
    assert msgspec.to_builtins(from_snapshot) == q
    assert msgspec.to_builtins(await history.read_queue_at(api.bus, no_snapshots, at)) == q


async def test_U4_jpu_why_in_english_and_korean_and_jpu_admin_explain_usage(
    api: Api,
    server: str,
) -> None:
    """The CLIs as people run them (real processes): `jpu why` over HTTP names Y's end and its
    charge as what demoted X; `jpu-admin explain-usage` reads the log from NATS and sums to the
    lab's usage (F5)."""
    ex = await r3_live(api)
    en = ok(await jpu(server, "alice", "why", ex.x, "--lang", "en"))
    print(en)  # -s shows what a lab member reads (docs/explanations.md quotes it)
    assert (
        f"because job {ex.y} (BCG) ended, freeing GPU 0 on gpu-4090x2-02, charging BCG 8,000" in en
    )
    assert (
        "released — demoted, it was no longer rank 1; 24,780 TFLOP-s charged to BCG at once" in en
    )
    assert f"then KDG's job {ex.k} (" in en and "only the rank-1 job keeps a reservation (R3)" in en
    assert "reserving 5m00s" in en and "running 10m00s" in en
    ko = ok(await jpu(server, "alice", "why", ex.x, "--lang", "ko"))
    assert "강등" in ko and f"1위: KDG 연구실의 작업 {ex.k}" in ko
    assert f"{ex.y} (BCG) 작업이 끝나 gpu-4090x2-02의 GPU 0가 비었음 — BCG에 8,000 TFLOP-s" in ko
    rc, out, err = await jpu(server, "carol", "why", ex.x)
    assert rc == 1 and "FORBIDDEN" in err, (rc, out, err)

    env = {
        **os.environ,
        "JPU_STREAM_NAME": api.config.stream_name,
        "JPU_SUBJECT_PREFIX": api.config.subject_prefix,
    }
    at = str(api.clock.now())
    args = (
        "-m",
        "jpu.tools.admin",
        "explain-usage",
        "BCG",
        "--nats",
        api.config.nats_url,
        "--at",
        at,
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable, *args, "--json", env=env, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out_b, err_b = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err_b.decode()
    x = json.loads(out_b)
    assert [c["reason"] for c in x["charges"]] == ["initial", "job_end", "demoted", "job_end"]
    lab = (await api.client.get("/v1/labs/BCG", headers=bearer("alice"))).json()
    assert x["usage"] == lab["usage"]
    assert x["total_value"] == pytest.approx(lab["usage"], abs=1e-6)
    # --db: the same answer from the usage_ledger projection (an index, for a long log)
    db = ("--db", "--database-url", api.config.database_url, "--json")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, *args, *db, env=env, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out_b, err_b = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err_b.decode()
    assert json.loads(out_b) == x
    proc = await asyncio.create_subprocess_exec(
        sys.executable, *args, env=env, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out_b, err_b = await asyncio.wait_for(proc.communicate(), 60)
    table = out_b.decode()
    assert proc.returncode == 0, err_b.decode()
    assert "reservation (R3, at release)" in table and "24,780.000" in table
    assert f"= its usage {lab['usage']:,.3f} (F5)" in table


async def test_U4_wait_of_a_queued_job_follows_the_log_and_is_not_cached(api: Api) -> None:
    """A job in flight: its wait runs to now and changes with the log (only terminal jobs are
    cached, S2); the pending reason is the cycle's (D7)."""
    from jpu.events import JobPromoted, JobSubmitted

    t = api.clock.now()
    await api.append(
        JobSubmitted(**api.kw(), job_id="q1", lab="KDG", user="kdg-carol", name="q1",
                     command="c", num_gpus=2, tiers=["rtx3080ti"]),
        JobPromoted(**api.kw(), job_id="q1", queue_entered_at=t),
    )  # fmt: skip
    api.clock.advance(60)
    first = (await api.client.get("/v1/jobs/q1/wait", headers=bearer("carol"))).json()
    assert (first["state"], first["terminal"]) == ("GLOBAL_QUEUE_WAIT", False)
    assert first["phases"]["global_queue"] == pytest.approx(60.0)
    assert first["steps"][-1]["rank"] == 1
    assert first["steps"][-1]["pending_reason"] is None  # 2 idle rtx3080ti: dispatched now
    await api.append(
        JobSubmitted(**api.kw(), job_id="q2", lab="BCG", user="bcg-alice", name="q2",
                     command="c", num_gpus=1),
        JobPromoted(**api.kw(), job_id="q2", queue_entered_at=t - 100),
    )  # fmt: skip
    api.clock.advance(60)
    again = (await api.client.get("/v1/jobs/q1/wait", headers=bearer("carol"))).json()
    assert again["phases"]["global_queue"] == pytest.approx(120.0)
    assert again["seq"] > first["seq"]
    assert again["steps"][-1]["cause"]["job_id"] == "q2"


async def test_A_openapi_describes_the_explanations(api: Api) -> None:
    doc = (await api.client.get("/openapi.json")).json()
    schemas = doc["components"]["schemas"]
    for name in ("WaitTimeline", "Step", "ReservationSpan", "Cause", "UsageExplanation",
                 "ChargeLine", "UsageStatement", "PastQueue"):  # fmt: skip
        assert name in schemas, name
    wait = doc["paths"]["/v1/jobs/{job_id}/wait"]["get"]["responses"]
    assert wait["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/WaitTimeline"
    }
    assert {"401", "403", "404"} <= set(wait)
    assert "at" in {p["name"] for p in doc["paths"]["/v1/queue"]["get"]["parameters"]}
    assert "/v1/admin/usage-statement" in doc["paths"]
    assert "/v1/admin/labs/{lab}/usage-explain" in doc["paths"]


async def test_why_promoted_at_once_and_an_oom_retry_waits_for_MinVram_D7_S1_X8(
    api: Api,
    server: str,
) -> None:
    """Live, with the real dispatcher: OSL fills every rtx4090; M (BCG, alice, no slot in use)
    is promoted at once and runs out of memory on a 12 GB rtx3080ti; its retry (min_vram_gb 13,
    X8) waits beside the idle 3080 Ti. The queue, the job and its wait say MinVram and 13 GB,
    not Resources (D7); the story starts with the free slot, not "all slots in use" (S1), and
    no "because" is an event's type."""
    from jpu.bus.views import ViewStore
    from jpu.events import EVENT_TYPES
    from jpu.explain.wait import CAUSE_KINDS

    config = msgspec.structs.replace(api.config, cycle_s=0.5, min_cycle_gap_s=0.02)
    clock, bus, m = api.clock, api.bus, "job-m"
    async with Watcher(bus, config) as w, services(api, config):
        for f in ("fill-1", "fill-2", "fill-3", "fill-4"):
            await submit_global(bus, clock, f, "OSL", "osl-erin", 1, tiers=["rtx4090"])
            await w.until(lambda s, f=f: s.jobs[f].placement)
            await start_job(bus, w.state, clock, f)
            await w.until(lambda s, f=f: s.jobs[f].state == "RUNNING")
        await submit_global(bus, clock, m, "BCG", "bcg-alice", 1)
        await w.until(lambda s: s.jobs[m].placement)
        assert w.state.jobs[m].placement[1] == "rtx3080ti"
        await start_job(bus, w.state, clock, m)
        await w.until(lambda s: s.jobs[m].state == "RUNNING")
        clock.advance(60)
        await end_job(bus, w.state, config, clock, m, "FAILED", oom=True)
        await w.until(lambda s: s.jobs[m].attempt == 2 and s.jobs[m].state == "GLOBAL_QUEUE_WAIT")
        deadline = asyncio.get_running_loop().time() + 15
        while (view := await ViewStore(bus).queue()) is None or m not in view.pending:
            assert asyncio.get_running_loop().time() < deadline, view
            await asyncio.sleep(0.05)
        assert view.pending[m] == "MinVram"  # the dispatcher's own reason (D7)
        await wait_applied(api.pool, "jobs", await bus.last_seq(), timeout=15)

        q = (await api.client.get("/v1/queue", headers=bearer("alice"))).json()
        (entry,) = [e for e in q["queue"] if e["job_id"] == m]
        assert (entry["pending_reason"], entry["min_vram_gb"]) == ("MinVram", 13)
        job = (await api.client.get(f"/v1/jobs/{m}", headers=bearer("alice"))).json()
        assert job["pending_reason"] == "MinVram" and job["min_vram_gb"] == 13
        r = await api.client.get(f"/v1/jobs/{m}/wait", headers=bearer("alice"))
        assert r.status_code == 200, r.text
        steps = r.json()["steps"]
        assert (steps[0]["state"], steps[0]["pending_reason"]) == ("PERSONAL_QUEUE_WAIT", None)
        assert steps[1]["cause"]["kind"] == "promoted_free_slot"
        assert steps[1]["cause"]["count"] == 0
        last = steps[-1]
        assert (last["pending_reason"], last["min_vram_gb"]) == ("MinVram", 13)
        assert last["cause"]["kind"] == "retried" and last["cause"]["tier"] == "rtx3080ti"
        assert all(s["cause"]["kind"] in CAUSE_KINDS for s in steps if s["cause"])

        queue_text = ok(await jpu(server, "alice", "queue"))
        assert "(MinVram>=13GB)" in queue_text, queue_text
        en = ok(await jpu(server, "alice", "why", m, "--lang", "en"))
        print(en)
        assert "because bcg-alice had a free slot (0 of their other jobs held slots): promoted " \
            "at once" in en  # fmt: skip
        assert "all of bcg-alice's slots" not in en
        assert "waits for a GPU with at least 13 GB; only smaller GPUs are idle (D7)" in en
        assert "retried on a GPU with at least 13 GB (X8)" in en
        for name in (t.__name__ for t in EVENT_TYPES):
            assert name not in en, name


async def test_why_names_the_jobs_holding_the_users_slots_S1_Q5(api: Api) -> None:
    """Through the real gateway: zoe's job, submitted by POST /v1/jobs to the real intake,
    stays in her personal queue (max_active_jobs 0): it waits for a slot though none of her
    jobs holds one. Alice's second job (the test acts as intake) waits while her first runs, and
    is promoted when it ends: the story names the job that held the slot and the one that freed
    it, never "promoted at once"."""
    from jpu.events import JobDispatched, JobEnded, JobPromoted, JobStarted, JobSubmitted

    r = await api.submit("zoe", {"command": "true", "num_gpus": 1, "name": "z"})
    assert r.status_code in (200, 201, 202), r.text
    z = r.json()["id"]
    await wait_applied(api.pool, "jobs", await api.bus.last_seq(), timeout=15)
    wait = (await api.client.get(f"/v1/jobs/{z}/wait", headers=bearer("zoe"))).json()
    (step,) = wait["steps"]
    assert (step["state"], step["pending_reason"], step["slot_holders"]) == (
        "PERSONAL_QUEUE_WAIT", "ConcurrencyLimit", [],
    )  # fmt: skip

    def job(jid: str) -> JobSubmitted:
        return JobSubmitted(**api.kw(), job_id=jid, lab="BCG", user="bcg-alice", name=jid,
                            command="c", num_gpus=1)  # fmt: skip

    await api.append(
        job("a1"),
        JobPromoted(**api.kw(), job_id="a1", queue_entered_at=api.clock.now()),
        JobDispatched(**api.kw(), job_id="a1", attempt=1, node="gpu-4090x2-01", tier="rtx4090",
                      gpus=[0]),
        JobStarted(**api.kw(), job_id="a1", attempt=1, backend_job_id="b-a1"),
        job("a2"),  # alice's only slot is a1's: a2 stays in her personal queue
    )  # fmt: skip
    api.clock.advance(60)
    await api.append(
        JobEnded(**api.kw(), job_id="a1", attempt=1, state="COMPLETED", exit_code=0,
                 node="gpu-4090x2-01", tier="rtx4090", gpus=[0]),
        JobPromoted(**api.kw(0.2), job_id="a2", queue_entered_at=api.clock.now() + 0.2),
    )  # fmt: skip
    r = await api.client.get("/v1/jobs/a2/wait", headers=bearer("alice"))
    assert r.status_code == 200, r.text
    steps = r.json()["steps"]
    assert (steps[0]["pending_reason"], steps[0]["slot_holders"]) == ("ConcurrencyLimit", ["a1"])
    cause = steps[1]["cause"]
    assert (cause["kind"], cause["jobs"], cause["user"]) == ("promoted_slot_freed", ["a1"],
                                                               "bcg-alice")  # fmt: skip
    assert cause["waited_s"] == pytest.approx(60.2)
    assert r.json()["phases"]["personal_queue"] == pytest.approx(60.2)
