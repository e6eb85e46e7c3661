"""The caller and the tiers (SPEC §8: `GET /v1/me`, `GET /v1/tiers`)."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, Field

from jpu.domain.states import SLOT_STATES, in_order  # S1: what holds a max_active_jobs slot
from jpu_services.gateway.deps import CurrentUser, PoolDep, SettingsDep
from jpu_services.gateway.errors import responses

router = APIRouter(prefix="/v1", tags=["users"])


class Me(BaseModel):
    user: str
    lab: str
    role: str
    max_active_jobs: int
    slots_in_use: int


class TierOut(BaseModel):
    name: str
    model: str
    vram_gb: int
    tflops: float
    sort_order: int
    max_gpus: int
    partition: str
    cpus_per_gpu: int
    mem_gb_per_gpu: int
    active: bool


@router.get("/me", responses=responses(401))
async def me(user: CurrentUser, pool: PoolDep, settings: SettingsDep) -> Me:
    used = await pool.fetchval(
        'SELECT count(*) FROM jobs WHERE "user" = $1'
        " AND (state = ANY($2::text[]) OR oom_pending)",  # X8: an undecided OOM retry (S1)
        user.name,
        list(in_order(SLOT_STATES)),
    )
    limit = user.max_active_jobs
    return Me(
        user=user.name,
        lab=user.lab,
        role=user.role,
        max_active_jobs=settings.base.max_active_jobs if limit is None else limit,
        slots_in_use=int(used),
    )


@router.get("/tiers", responses=responses(401))
async def tiers(_: CurrentUser, settings: SettingsDep, active: bool | None = None) -> list[TierOut]:
    """Tiers best first (SPEC T1); they are configuration (§1.1). `?active=` filters (T2)."""
    ordered = sorted(settings.base.tiers, key=lambda t: -t.sort_order)
    return [
        TierOut(**{f: getattr(t, f) for f in TierOut.model_fields})
        for t in ordered
        if active is None or t.active == active
    ]


class SbatchOut(BaseModel):
    partition_aliases: dict[str, list[str]]
    sbatch_compat: str
    sbatch_unknown_partition: str
    mail: bool = Field(description="the site sends e-mail (smtp_host is set; SPEC Q10)")


@router.get("/sbatch", responses=responses(401))
async def sbatch(_: CurrentUser, settings: SettingsDep) -> SbatchOut:
    """The site's sbatch settings (SPEC U6, docs/sbatch.md): partition aliases, strictness."""
    b = settings.base
    return SbatchOut(
        partition_aliases=dict(b.partition_aliases),
        sbatch_compat=b.sbatch_compat,
        sbatch_unknown_partition=b.sbatch_unknown_partition,
        mail=bool(b.smtp_host),  # Q10: `--mail-user` on a site without is warned at submit
    )
