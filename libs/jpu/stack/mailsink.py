"""`make run`'s local mail sink (SPEC Q10 in the demo): a real SMTP server (aiosmtpd) on
127.0.0.1 that keeps every message it is given in a maildir, `<data_dir>/mail`, and sends
nothing on. The stack starts it only when the configuration names no SMTP server (`smtp_host`
empty) and points the notifier at it, so `--mail-type` visibly works in the demo: each message
is one file under `mail/new/`, readable with `mutt -f .jpu/mail` or any text viewer. A site's
own `smtp_host` always wins (the sink does not start)."""

from __future__ import annotations

import mailbox
from pathlib import Path
from typing import Any

from aiosmtpd.controller import Controller

from jpu.embedded.base import free_port

HOST = "127.0.0.1"


class _Keep:
    """aiosmtpd handler: the message as received, its envelope recipients first (the headers
    may name others, e.g. Bcc), into the maildir."""

    def __init__(self, box: mailbox.Maildir) -> None:
        self.box = box

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        delivered = "".join(f"Delivered-To: {to}\r\n" for to in envelope.rcpt_tos)
        self.box.add(delivered.encode() + envelope.original_content)
        return "250 OK: kept in the local maildir"


class MailSink:
    def __init__(self, maildir: Path) -> None:
        self.maildir = maildir
        self.port = free_port()
        box = mailbox.Maildir(maildir, create=True)
        self._controller = Controller(_Keep(box), hostname=HOST, port=self.port)

    def start(self) -> None:
        self._controller.start()

    def stop(self) -> None:
        self._controller.stop()

    def env(self) -> dict[str, str]:
        """The notifier's SMTP settings (config smtp_host/smtp_port) pointing here."""
        return {"JPU_SMTP_HOST": HOST, "JPU_SMTP_PORT": str(self.port)}
