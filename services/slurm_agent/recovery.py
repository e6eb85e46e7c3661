"""Fold every job subject of the log into AgentJobs (the agent's view at restart)."""

from __future__ import annotations

from jpu.bus import EventBus
from jpu.config import Config
from jpu.events import JobSubmitted
from jpu.fold_jobs import JobView
from jpu_services.slurm_agent.jobstate import AgentJob


async def fold_log(bus: EventBus, config: Config) -> tuple[dict[str, AgentJob], int]:
    """(jobs by id, last stream seq folded); later events reach the durable consumer."""
    tiers = {t.name: t for t in config.tiers}
    jobs: dict[str, AgentJob] = {}
    last = await bus.last_seq()
    async for d in bus.replay(filter_subject=f"{config.subject_prefix}.job.>"):
        if d.seq > last:
            break
        e = d.event
        if isinstance(e, JobSubmitted):
            jobs.setdefault(e.job_id, AgentJob(JobView.submitted(e, d.seq), e))
            continue
        job = jobs.get(getattr(e, "job_id", ""))
        if job is not None:
            job.apply(d, tiers)
    return jobs, last
