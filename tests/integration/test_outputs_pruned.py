"""outputs_keep_days on a real log: the agent removes an ended job's outputs once they are older
than the site keeps them, decided from the job's own events (jpu.domain.retention), and nothing
else: not a running job's, not a recent one's, not a folder the log does not know, and never
anything a symlink below the output root points at."""

from __future__ import annotations

import os
from pathlib import Path

from jpu.bus import EventBus
from jpu.config import load_config
from jpu.domain.retention import DAY_S
from jpu.events import JobEnded, new_event_id
from jpu.testing.sample_events import promoted, submitted
from jpu_services.slurm_agent.retention import prune_outputs
from jpu_services.slurm_agent.run import ended_reader

NOW = 1_000 * DAY_S


def _ended(job_id: str, ts: float) -> JobEnded:
    return JobEnded(
        event_id=new_event_id(),
        ts=ts,
        job_id=job_id,
        attempt=1,
        state="COMPLETED",
        gpu_seconds_run=10.0,
        tflops=82.6,
        usage=826.0,
    )


def _outputs(root: Path, job_id: str) -> Path:
    out = root / job_id / "1"
    out.mkdir(parents=True)
    (out / "stdout").write_text("epoch 1\n")
    return out


async def _job(bus: EventBus, job_id: str, ended_at: float | None) -> None:
    await bus.append(submitted(job_id, ts=ended_at - 60 if ended_at else NOW - 60))
    await bus.append(promoted(job_id, ts=ended_at - 50 if ended_at else NOW - 50))
    if ended_at is not None:
        await bus.append(_ended(job_id, ended_at))


async def test_outputs_keep_days_removes_only_old_ended_jobs_outputs(
    bus: EventBus, tmp_path: Path
) -> None:
    config = load_config()
    tiers = {t.name: t for t in config.tiers}
    root = tmp_path / "outputs"
    await _job(bus, "old-ended", ended_at=NOW - 8 * DAY_S)
    await _job(bus, "new-ended", ended_at=NOW - 1 * DAY_S)
    await _job(bus, "waiting", ended_at=None)  # submitted long ago, never ended
    await _job(bus, "live-old", ended_at=NOW - 9 * DAY_S)
    for job_id in ("old-ended", "new-ended", "waiting", "unknown-to-the-log", "live-old"):
        _outputs(root, job_id)
    # the job's account owns its directory: a symlink it planted must not lead the removal out
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "data").write_text("keep me")
    os.symlink(precious, root / "old-ended" / "1" / "escape")
    os.symlink(precious, root / "link-at-top")  # not a directory entry: never followed

    removed = await prune_outputs(
        root, ended_reader(bus, tiers), NOW, keep_days=7, live={"live-old"}
    )

    assert removed == ["old-ended"]
    assert not (root / "old-ended").exists()
    left = sorted(p.name for p in root.iterdir())
    assert left == ["link-at-top", "live-old", "new-ended", "unknown-to-the-log", "waiting"]
    assert (precious / "data").read_text() == "keep me"
    # a second round finds nothing more to do
    assert await prune_outputs(root, ended_reader(bus, tiers), NOW, keep_days=7) == ["live-old"]


async def test_outputs_keep_days_zero_removes_nothing(bus: EventBus, tmp_path: Path) -> None:
    tiers = {t.name: t for t in load_config().tiers}
    await _job(bus, "ended-long-ago", ended_at=1.0)
    _outputs(tmp_path, "ended-long-ago")
    assert await prune_outputs(tmp_path, ended_reader(bus, tiers), NOW, keep_days=0) == []
    assert (tmp_path / "ended-long-ago" / "1" / "stdout").exists()
