"""`jpu notify`: your notification defaults (SPEC Q10; GET/PUT /v1/me/notifications).

    jpu notify                                    # show them
    jpu notify --email me@lab.example --mail-type END,FAIL
    jpu notify --webhook https://hooks.slack.com/services/...   # Slack-compatible
    jpu notify --off                              # no notifications by default (NONE)

Options given change only what they name (the API replaces the settings whole: the CLI reads
them first); an empty value clears an address (`--email ''`). A job's own `--mail-type` /
`--mail-user` (or `#SBATCH` lines) win over these defaults.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from jpu.cli.rest.client import RestClient, resolve_target


def add_parser(sub: Any, common: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "notify",
        parents=common,
        help="your notification defaults (e-mail, webhook, kinds)",
        description="Show or change your notification defaults (SPEC Q10); a job's own "
        "--mail-type / --mail-user win over them.",
    )
    p.add_argument("--email", metavar="ADDRESS", help="where e-mail notifications go")
    p.add_argument("--webhook", metavar="URL", help="a Slack-compatible webhook URL")
    p.add_argument(
        "--mail-type",
        metavar="KINDS",
        help="default kinds: BEGIN,END,FAIL,REQUEUE (an OOM retry), ALL or NONE; add "
        "ARRAY_TASKS for a notification per task of an array (default: once per array)",
    )
    p.add_argument("--off", action="store_true", help="no notifications by default (NONE)")
    p.set_defaults(func=cmd_notify)


def cmd_notify(args: argparse.Namespace) -> int:
    with RestClient(resolve_target(args.url, args.token)) as c:
        current = c.get("/v1/me/notifications")
        changes = {
            "email": args.email,
            "webhook_url": args.webhook,
            "mail_type": "NONE" if args.off else args.mail_type,
        }
        if any(v is not None for v in changes.values()):
            body = {k: current[k] for k in ("email", "webhook_url", "mail_type")}
            body.update({k: v for k, v in changes.items() if v is not None})
            current = c.put("/v1/me/notifications", body)
    print(json.dumps(current, indent=2, sort_keys=True) if args.json else render(current))
    return 0


def render(s: dict[str, Any]) -> str:
    kinds = ",".join(s.get("mail_type") or []) or "NONE"
    return "\n".join(
        [
            f"E-mail:      {s.get('email') or '-'}",
            f"Webhook:     {s.get('webhook_url') or '-'}",
            f"Notify on:   {kinds}  (jobs that give no --mail-type)",
        ]
    )
