"""What `jpu submit` sends, decided as intake decides it (SPEC U6), without a server: the
CLI's request body (jpu.cli.rest.submit.request) through jpu.domain.submission.with_sbatch on a
site, answering as `jpu submit` does — the decided body and the lines it prints, or the
RestError it raises. Pure (the default configuration's site unless one is given)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any

from jpu.cli.rest.client import ApiError
from jpu.cli.rest.submit import request, sbatch_refusal
from jpu.commands import CommandReply, SubmitCommand
from jpu.config import load_config
from jpu.domain.submission import checked, submitted, with_sbatch
from jpu.policy import sbatch as policy


@dataclass
class Said:
    """What `jpu submit` prints at submit (U6's notes and warnings) and what the job keeps."""

    warnings: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # JobSubmitted.sbatch_warnings


def default_site(lab: str | None = None) -> policy.Site:
    return policy.site_of(load_config(), lab)


def decided(
    body: dict[str, Any], site: policy.Site | None = None, lab: str = "BCG"
) -> tuple[dict[str, Any], Said]:
    """`body` as intake decides it on `site`; a refusal raised as `jpu submit` raises it."""
    site = site or default_site()
    cmd, answer = with_sbatch(SubmitCommand(user="alice", lab=lab, body=body), site)
    if answer.refusal is not None:
        assert answer.refusal.error is not None
        e = answer.refusal.error
        refused = sbatch_refusal(ApiError(answer.refusal.status, e.code, e.message, e.details))
        raise refused or ApiError(answer.refusal.status, e.code, e.message, e.details)
    sub = checked(cmd, {t.name: t for t in site.tiers})  # Q1, as intake's next step
    if isinstance(sub, CommandReply):
        assert sub.error is not None
        raise ApiError(sub.status, sub.error.code, sub.error.message, sub.error.details)
    event = submitted(sub, "j" * 24, 0.0, "e", None, answer.warnings)
    said = Said([w["message"] for w in answer.said()], list(event.sbatch_warnings))
    return dict(cmd.body), said


def submit(
    args: argparse.Namespace, stdin: Any = None, site: policy.Site | None = None
) -> tuple[dict[str, Any], Said]:
    return decided(request(args, stdin)[0], site)
