"""`jpu why JOB`: why a job waited, in words a lab member understands (SPEC U4).

It prints `GET /v1/jobs/{id}/wait` (jpu.explain.wait): time in each phase, each change of the
job's rank and pending reason with what caused it and the labs ahead, and each reservation with
how it ended — for an R3 demotion, the charge that reordered the queue and who ranked first.
English or Korean: `--lang`, else `JPU_LANG`, else the locale (`LC_ALL`, `LC_MESSAGES`, `LANG`
starting with `ko`), as the console follows the browser's language. Rendering is pure.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Mapping
from importlib import resources
from typing import Any, Final
from urllib.parse import quote

from jpu.cli.rest import subcommands as rest
from jpu.cli.rest.client import RestClient, resolve_target

USER_ERRORS: tuple[type[Exception], ...] = ()

# One catalog of the "why" sentences in English and Korean, the console's too (the gateway
# serves the same file at /console/why.json): jpu/explain/why.json
_T: Final[dict[str, dict[str, str]]] = json.loads(
    resources.files("jpu.explain").joinpath("why.json").read_text(encoding="utf-8")
)


def language(explicit: str | None = None, env: Mapping[str, str] | None = None) -> str:
    """`--lang`, else JPU_LANG, else the locale; English by default."""
    env = os.environ if env is None else env
    for value in (explicit, env.get("JPU_LANG"), env.get("LC_ALL"), env.get("LC_MESSAGES"),
                  env.get("LANG")):  # fmt: skip
        if value:
            return "ko" if value.lower().startswith("ko") else "en"
    return "en"


def _n(x: float | None) -> str:
    return "?" if x is None else f"{x:,.0f}"


def _when(ts: float | None) -> str:
    return "?" if ts is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def _secs(s: float) -> str:
    s = round(s)
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    return f"{h}h{m:02d}m{sec:02d}s" if h else (f"{m}m{sec:02d}s" if m else f"{sec}s")


def _cause(t: dict[str, str], cause: Mapping[str, Any] | None) -> str:
    """The cause in words: one sentence per kind (jpu.explain.wait.CauseKind), or per kind and
    reason; never the event's type."""
    if not cause:
        return ""
    kind, reason = cause.get("kind", ""), cause.get("reason")
    if kind == "dependency_never_satisfied" and cause.get("jobs"):  # Q8: the parent, its end
        reason = "parent" if cause.get("state") else "unknown"
    template = t.get(f"cause.{kind}.{reason}") or t.get(f"cause.{kind}")
    if template is None:
        return ""
    jobs = ", ".join(cause.get("jobs") or [])
    waited = _secs(cause.get("waited_s") or 0.0)
    message = cause.get("message")
    fields = {
        "job": cause.get("job_id") or "",
        "lab": cause.get("lab") or "",
        "jobs": jobs,
        "other_lab": cause.get("other_lab") or "",
        "user": cause.get("user") or "",
        "node": cause.get("node") or "",
        "tier": cause.get("tier") or "",
        "gpus": ",".join(str(g) for g in cause.get("gpus") or []),
        "count": cause.get("count"),
        "needed": cause.get("needed"),
        "vram": cause.get("vram_gb"),
        "min_vram": cause.get("min_vram_gb"),
        "code": cause.get("code"),
        "reason": reason or "",
        "why": t.get(f"release.{reason}", reason or ""),
        "state": cause.get("state") or "",
        "by": cause.get("by") or "",
        "message": t["message"].format(message=message) if message else "",
        "waited": waited,
        "after": t["at_once"] if (cause.get("waited_s") or 0.0) < 1 else t["after"].format(
            waited=waited),
        "freed": t["freed_by"].format(jobs=jobs) if jobs else "",
    }  # fmt: skip
    text = template.format(**fields)
    if kind == "other_entered_ahead" and cause.get("lab_usage") is not None:
        text += t["usage"].format(lab=cause["lab"], usage=_n(cause["lab_usage"]))
    if cause.get("charge") is not None and cause.get("lab"):
        text += t["charged"].format(
            lab=cause["lab"], charge=_n(cause["charge"]), usage=_n(cause.get("lab_usage"))
        )
    return text


def _reason(t: dict[str, str], step: Mapping[str, Any], user: str) -> str:
    reason = step["pending_reason"]
    if not reason:
        return t["reason.none"]
    holders = ", ".join(step.get("slot_holders") or [])
    if reason == "ConcurrencyLimit" and not holders:
        reason = "ConcurrencyLimit.none"
    return t.get(f"reason.{reason}", reason).format(
        user=user, jobs=holders, min_vram=step.get("min_vram_gb")
    )


def render(wait: Mapping[str, Any], lang: str = "en") -> str:
    """The wait in sentences (pure: the API's body in, text out)."""
    t = _T.get(lang, _T["en"])
    jid = str(wait["job_id"])
    out = [
        t["head"].format(
            job=jid,
            name=wait.get("name"),
            lab=wait["lab"],
            user=wait["user"],
            state=t.get(f"state.{wait['state']}", wait["state"]),
        ),
        t["phases"].format(
            phases=" · ".join(
                f"{t.get('phase.' + k, k)} {_secs(v)}" for k, v in wait["phases"].items()
            )
        ),
        "",
        t["changes"],
    ]
    for s in wait["steps"]:
        state = t.get(f"state.{s['state']}", s["state"])
        line = f"  {_when(s['at'])}  {state}"
        if s["rank"] is not None:
            line += ", " + t["rank"].format(rank=s["rank"], n=s["queue_length"])
            line += " — " + _reason(t, s, wait["user"])
        elif s["pending_reason"]:
            line += " — " + _reason(t, s, wait["user"])
        out.append(line)
        cause = _cause(t, s.get("cause"))
        if cause:
            out.append("      " + t["because"] + cause)
        elif s.get("sampled"):
            out.append("      " + t["sampled"])
        if s["ahead"]:
            labs = ", ".join(
                t["ahead_lab"].format(
                    lab=a["lab"],
                    usage=_n(a["usage"]),
                    jobs=a["jobs"],
                    s="" if a["jobs"] == 1 else "s",
                )
                for a in s["ahead"]
            )
            out.append("      " + t["ahead"].format(labs=labs) + "; "
                       + t["own"].format(lab=wait["lab"], usage=_n(s["lab_usage"])))  # fmt: skip
    out += ["", t["reservations"]]
    if not wait["reservations"]:
        out.append("  " + t["no_reservations"])
    for r in wait["reservations"]:
        gpus = ",".join(map(str, r["gpus"]))
        line = "  " + t["res"].format(node=r["node"], tier=r["tier"], gpus=gpus,
                                      start=_when(r["started_at"]))  # fmt: skip
        if r["reason"] is None:
            line += t["res_held"]
        else:
            secs = _secs((r["ended_at"] or r["started_at"]) - r["started_at"])
            reason = t.get(f"release.{r['reason']}", r["reason"])
            line += t["res_end"].format(end=_when(r["ended_at"]), secs=secs, reason=reason)
            key = "res_cost_now" if r["charged_now"] else "res_cost_later"
            line += t[key].format(cost=_n(r["cost"]), lab=wait["lab"])
        out.append(line)
        if r.get("demoted_by"):
            out.append(
                "    "
                + t["demoted_why"].format(
                    cause=_cause(t, r["demoted_by"]),
                    first=r.get("overtaken_by"),
                    first_lab=r.get("overtaken_by_lab"),
                    first_usage=_n(r.get("overtaken_by_usage")),
                )
            )
    out += ["", t["note"]]
    return "\n".join(out)


def register(sub: Any) -> None:
    common = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    rest.add_target_options(common, defaults=False)
    p = sub.add_parser(
        "why", parents=[common], help="why a job waited (rank, reason, reservations)"
    )
    p.add_argument("job_id", metavar="JOB")
    p.add_argument(
        "--lang", choices=("en", "ko"), help="language (default: JPU_LANG or the locale)"
    )
    p.set_defaults(func=cmd_why)


def cmd_why(args: argparse.Namespace) -> int:
    with RestClient(resolve_target(args.url, args.token)) as c:
        wait = c.get(f"/v1/jobs/{quote(args.job_id, safe='')}/wait")
    if args.json:
        print(json.dumps(wait, indent=2, sort_keys=True, ensure_ascii=False))
    else:
        print(render(wait, language(args.lang)))
    return 0
