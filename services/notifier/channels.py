"""The two ways a notification leaves (SPEC Q10): e-mail over SMTP, and a Slack-compatible
webhook (`{"text": ...}` POSTed as JSON). Each raises on any refusal so the sender retries."""

from __future__ import annotations

import asyncio
import smtplib
from email.message import EmailMessage
from email.utils import make_msgid

import httpx

from jpu_services.notifier.config import NotifierConfig


class NotConfigured(Exception):
    """The channel cannot send at all here (no SMTP server): retrying would not help."""


class Channels:
    def __init__(self, config: NotifierConfig) -> None:
        self.config = config
        self._http = httpx.AsyncClient(timeout=config.send_timeout_s, follow_redirects=False)

    async def close(self) -> None:
        await self._http.aclose()

    async def send(self, channel: str, recipient: str, subject: str, text: str, key: str) -> None:
        if channel == "webhook":
            await self.webhook(recipient, text)
        elif channel == "email":
            await asyncio.to_thread(self.email, recipient, subject, text, key)
        else:
            raise NotConfigured(f"unknown channel {channel!r}")

    async def webhook(self, url: str, text: str) -> None:
        response = await self._http.post(url, json={"text": text})
        response.raise_for_status()

    def email(self, to: str, subject: str, text: str, key: str) -> None:
        c = self.config
        if not c.smtp_host:
            raise NotConfigured("no SMTP server configured (smtp_host)")
        msg = EmailMessage()
        msg["From"], msg["To"], msg["Subject"] = c.smtp_from, to, subject
        msg["Message-ID"] = make_msgid(domain="jpu-share")
        msg["X-JPU-Notification"] = key  # the sent-log key: a repeat is recognisable (Q10)
        msg.set_content(text)
        with smtplib.SMTP(c.smtp_host, c.smtp_port, timeout=c.send_timeout_s) as smtp:
            if c.smtp_starttls:
                smtp.starttls()
            if c.smtp_user:
                smtp.login(c.smtp_user, c.smtp_password)
            smtp.send_message(msg)
