"""The two ways a notification leaves (SPEC Q10): e-mail over SMTP, and a Slack-compatible
webhook (`{"text": ...}` POSTed as JSON). Each raises on any refusal so the sender retries.

SPEC SEC4: a webhook's host is resolved here, every address checked (jpu.policy.outbound), and
the POST connects to the checked address itself — the name is not resolved a second time, so a
DNS answer that changes in between (rebinding) cannot redirect it. The Host header and TLS SNI
(and certificate check) still name the URL's host. Redirects are not followed. A refused address
raises Refused: recorded abandoned at once, never retried."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import smtplib
import socket
from email.message import EmailMessage
from email.utils import make_msgid

import httpx

from jpu.policy import outbound
from jpu.runtime import metrics
from jpu_services.notifier.config import NotifierConfig

log = logging.getLogger(__name__)


class NotConfigured(Exception):
    """The channel cannot send at all here (no SMTP server): retrying would not help."""


class Refused(NotConfigured):
    """SPEC SEC4: the destination is one the platform must not reach for a user."""


class Channels:
    def __init__(self, config: NotifierConfig) -> None:
        self.config = config
        self._http = httpx.AsyncClient(timeout=config.send_timeout_s, follow_redirects=False)
        self._allow = outbound.parse_networks(config.webhook_allow_networks)

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
        target, host, name = await self._pinned(url)
        response = await self._http.post(
            target, json={"text": text}, headers={"Host": host}, extensions={"sni_hostname": name}
        )
        response.raise_for_status()  # a 3xx is not followed: it fails like any refusal

    async def _pinned(self, url: str) -> tuple[httpx.URL, str, str]:
        """`url` with its host replaced by the checked address it resolves to, the Host header
        and the TLS server name to send. Raises Refused (SEC4), or OSError when the name does
        not resolve (retried like any receiver that is down)."""
        parts = outbound.split(url)
        why = outbound.url_problem(url, self._allow)
        if parts is None or why:
            raise self._refuse(url, why or "not an http(s) URL")
        assert parts.hostname is not None
        port = parts.port or (443 if parts.scheme == "https" else 80)
        infos = await asyncio.get_running_loop().getaddrinfo(
            parts.hostname, port, type=socket.SOCK_STREAM
        )
        addresses = [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]
        if why := outbound.addresses_problem(addresses, self._allow):
            raise self._refuse(url, why)
        target = httpx.URL(url).copy_with(host=str(addresses[0]), port=port)
        return target, parts.netloc.rpartition("@")[2], parts.hostname

    @staticmethod
    def _refuse(url: str, why: str) -> Refused:
        # a security event: a user's webhook aimed where the platform must not go
        log.warning(
            "webhook refused (SEC4)",
            extra={"security_event": "webhook_refused", "host": httpx.URL(url).host, "why": why},
        )
        metrics.count_webhook_refused()
        return Refused(f"webhook refused: {why}")

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
