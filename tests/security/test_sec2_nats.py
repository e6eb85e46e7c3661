"""SPEC SEC2 on a real nats-server started with the configuration the stack generates
(jpu.bus.auth + jpu.bus.permissions): one identity per service, only an event type's owner
publishes its subject, the gateway sends commands and no event, anonymous clients are refused."""

from __future__ import annotations

import asyncio
import json
import shutil
import ssl
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import nats
import nats.errors
import pytest
import pytest_asyncio
import yaml
from nats.aio.client import Client

from jpu import events as ev
from jpu.bus import EventBus, auth, permissions
from jpu.embedded.nats import EmbeddedNats
from jpu.events import encode, new_event_id, subject_for
from jpu.tools import nats_auth

STREAM, PREFIX = "JPU", "jpu"
REFUSE_WAIT_S = 1.0  # a refused publish is never acknowledged; the server says why at once


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    """The stack's own way: passwords generated into a 0600 file, the server's `-c` file."""
    data = tmp_path_factory.mktemp("sec2")
    passwords = auth.ensure_secrets(auth.secrets_path(data))
    conf = auth.write_server_config(data / "secrets" / "nats.conf", passwords, STREAM, PREFIX)
    server = EmbeddedNats(data / "nats", extra_args=["-c", str(conf)])
    try:
        yield server.start(), passwords
    finally:
        server.stop()


@pytest_asyncio.fixture(scope="module")
async def stream(secured: tuple[str, dict[str, str]]) -> AsyncIterator[None]:
    url, passwords = secured
    nc = await nats.connect(url, user="admin", password=passwords["admin"])
    admin = EventBus(nc, stream=STREAM, prefix=PREFIX)
    await admin.ensure_stream()
    yield
    await nc.close()


class Identity:
    """A connection as one user, remembering the server's permission errors."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.nc: Client | None = None

    async def connect(self, url: str, user: str, password: str) -> Identity:
        async def error_cb(e: Exception) -> None:
            self.errors.append(str(e))

        self.nc = await nats.connect(url, user=user, password=password, error_cb=error_cb)
        return self

    async def publish_event(self, event: ev.Event) -> Any:
        """Append as EventBus does (a JetStream publish on the event's subject)."""
        assert self.nc is not None
        js = self.nc.jetstream()
        return await js.publish(
            subject_for(event, PREFIX), encode(event), stream=STREAM, timeout=REFUSE_WAIT_S
        )

    def refused(self, subject: str) -> bool:
        return any(
            f'permissions violation for publish to "{subject.lower()}"' in e.lower()
            for e in self.errors
        )


@pytest_asyncio.fixture
async def as_user(secured: tuple[str, dict[str, str]], stream: None) -> AsyncIterator[Any]:
    url, passwords = secured
    opened: list[Identity] = []

    async def connect(user: str) -> Identity:
        opened.append(await Identity().connect(url, user, passwords[user]))
        return opened[-1]

    yield connect
    for i in opened:
        assert i.nc is not None
        await i.nc.close()


def _usage(lab: str) -> ev.UsageCharged:
    return ev.UsageCharged(
        event_id=new_event_id(), ts=1.0, lab=lab, amount=1.0, value_after=1.0, as_of=1.0
    )


def _maintenance() -> ev.MaintenanceChanged:
    return ev.MaintenanceChanged(event_id=new_event_id(), ts=1.0, state="DRAINING", by="x")


async def _last_on(secured: tuple[str, dict[str, str]], subject: str) -> int:
    url, passwords = secured
    nc = await nats.connect(url, user="admin", password=passwords["admin"])
    try:
        bus = EventBus(nc, stream=STREAM, prefix=PREFIX)
        return await bus.last_subject_seq(subject)
    finally:
        await nc.close()


async def test_SEC2_an_anonymous_connection_is_refused(
    secured: tuple[str, dict[str, str]],
) -> None:
    url, passwords = secured
    with pytest.raises((nats.errors.Error, OSError)):
        await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0)
    with pytest.raises((nats.errors.Error, OSError)):
        await nats.connect(
            url, user="gateway", password=passwords["intake"], allow_reconnect=False,
            max_reconnect_attempts=0,
        )  # fmt: skip


async def test_SEC2_a_service_publishing_another_services_event_type_is_refused(
    as_user: Any, secured: tuple[str, dict[str, str]]
) -> None:
    dispatcher = await as_user("dispatcher")
    forged = _usage("forged")
    with pytest.raises((nats.errors.TimeoutError, TimeoutError)):
        await dispatcher.publish_event(forged)  # UsageCharged is accounting's
    assert dispatcher.refused(subject_for(forged, PREFIX))
    assert await _last_on(secured, subject_for(forged, PREFIX)) == 0  # not in the log
    accounting = await as_user("accounting")  # its owner may
    ack = await accounting.publish_event(_usage("owned"))
    assert ack.seq > 0 and not accounting.errors


async def test_SEC2_the_gateway_publishes_commands_not_events(as_user: Any) -> None:
    gateway = await as_user("gateway")
    for event in (_maintenance(), _usage("x")):
        with pytest.raises((nats.errors.TimeoutError, TimeoutError)):
            await gateway.publish_event(event)
        assert gateway.refused(subject_for(event, PREFIX))
    # A command goes through to the server's routing: no intake runs here, so no responders
    # (a refused request would time out with a permission error instead).
    with pytest.raises(nats.errors.NoRespondersError):
        await gateway.nc.request(f"{PREFIX}_cmd.submit", b"{}", timeout=REFUSE_WAIT_S)
    assert not gateway.refused(f"{PREFIX}_cmd.submit")
    intake = await as_user("intake")  # intake appends an admin's maintenance request (SEC2)
    assert (await intake.publish_event(_maintenance())).seq > 0


async def test_SEC2_SEC3_no_service_adds_an_identity_only_the_admin(
    as_user: Any, secured: tuple[str, dict[str, str]]
) -> None:
    """An admin made by a compromised gateway (or intake) would own the platform: identity
    events are the admin identity's alone."""
    forged = ev.UserAdded(
        event_id=ev.new_event_id(), ts=1.0, user="mallory", lab="BCG", role="admin"
    )
    subject = subject_for(forged, PREFIX)
    for service in ("gateway", "intake", "dispatcher"):
        user = await as_user(service)
        with pytest.raises((nats.errors.TimeoutError, TimeoutError)):
            await user.publish_event(forged)
        assert user.refused(subject), service
    assert await _last_on(secured, subject) == 0  # not in the log
    admin = await as_user("admin")
    assert (await admin.publish_event(forged)).seq > 0


async def test_SEC2_only_the_admin_creates_or_updates_streams(as_user: Any) -> None:
    intake = await as_user("intake")
    js = intake.nc.jetstream(timeout=REFUSE_WAIT_S)
    info = await js.stream_info(STREAM)  # reading it is allowed
    with pytest.raises((nats.errors.TimeoutError, TimeoutError)):
        await js.update_stream(info.config)
    assert intake.refused(f"$JS.API.STREAM.UPDATE.{STREAM}")
    with pytest.raises((nats.errors.TimeoutError, TimeoutError)):
        await js.delete_stream(STREAM)


def test_SEC2_every_event_type_has_an_owner_and_its_subject_is_covered() -> None:
    """The table follows the event catalogue: a new event type without an owner fails here."""
    for event_type in _event_types(ev.Event):
        if event_type in (ev.JobEvent, ev.WorkspaceEvent, ev.IdentityEvent):
            continue
        if issubclass(event_type, ev.IdentityEvent):  # SEC3: the admin's alone, no service's
            assert permissions.OWNERS[event_type] == (), event_type.__name__
            continue
        assert permissions.OWNERS.get(event_type), f"{event_type.__name__} has no owner"
    assert permissions.owned_subjects("gateway", PREFIX) == []
    perms = permissions.service_permissions("gateway")
    assert not any(p.startswith(f"{PREFIX}.") for p in perms.publish)


def test_SEC2_the_secrets_file_is_private_and_kept(tmp_path: Path) -> None:
    path = auth.secrets_path(tmp_path)
    first = auth.ensure_secrets(path)
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700
    assert auth.ensure_secrets(path) == first  # generated once, kept across restarts
    assert len(set(first.values())) == len(first)


def _event_types(base: type) -> list[type]:
    out = []
    for sub in base.__subclasses__():
        out += [sub, *_event_types(sub)]
    return out


async def test_SEC2_a_service_connects_with_its_own_identity_from_the_environment(
    secured: tuple[str, dict[str, str]], stream: None, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    url, passwords = secured
    secrets = auth.secrets_path(tmp_path)
    secrets.parent.mkdir()
    secrets.write_text(json.dumps({"users": {"accounting": passwords["accounting"]}}))
    for key, value in auth.identity_env("accounting", secrets).items():
        monkeypatch.setenv(key, value)
    bus = await EventBus.connect(url, stream=STREAM, prefix=PREFIX)
    try:
        assert bus.user == "accounting"
        await bus.ensure_stream()  # a service only checks the stream exists
        assert await bus.append(_usage("env")) > 0
    finally:
        await asyncio.wait_for(bus.close(), 10)


ROOT = Path(__file__).resolve().parents[2]


def test_SEC2_the_deployments_authorization_is_the_tables_and_holds_no_secret() -> None:
    """compose/nats-auth.conf and k8s/nats.yaml's auth.conf are `nats_auth render` (no drift);
    every password in them is an environment reference."""
    want = nats_auth.rendered()
    assert (ROOT / "compose" / "nats-auth.conf").read_text() == want
    k8s = next(yaml.safe_load_all((ROOT / "k8s" / "nats.yaml").read_text()))
    assert k8s["data"]["auth.conf"] == want
    assert "include ./auth.conf" in k8s["data"]["nats.conf"]
    for line in want.splitlines():
        if "password:" in line:
            assert "password: $NATS_PW_" in line, line


def test_SEC2_the_rendered_file_takes_its_passwords_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server started on the checked-in file (as compose and k8s do) resolves NATS_PW_<USER>."""
    passwords = auth.ensure_secrets(auth.secrets_path(tmp_path))
    for user, password in passwords.items():
        monkeypatch.setenv(nats_auth.env_name(user), password)
    server = EmbeddedNats(
        tmp_path / "nats", extra_args=["-c", str(ROOT / "compose" / "nats-auth.conf")]
    )
    url = server.start()

    async def probe() -> None:
        nc = await nats.connect(url, user="notifier", password=passwords["notifier"])
        await nc.close()
        with pytest.raises((nats.errors.Error, OSError)):
            await nats.connect(
                url, user="notifier", password="wrong", allow_reconnect=False,
                max_reconnect_attempts=0,
            )  # fmt: skip

    try:
        asyncio.run(probe())
    finally:
        server.stop()


def _self_signed(tmp: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 (its own CA), with openssl; (cert, key)."""
    cert, key = tmp / "server.pem", tmp / "server.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is needed to make a cert")
def test_SEC2_tls_to_nats_is_configured_by_the_tls_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nats_tls_ca (JPU_NATS_TLS_CA) reaches nats.connect: a TLS-only server is reached with
    the CA, and not without it."""
    cert, key = _self_signed(tmp_path)
    passwords = auth.ensure_secrets(auth.secrets_path(tmp_path))
    conf = auth.write_server_config(tmp_path / "nats.conf", passwords, STREAM, PREFIX)
    with conf.open("a") as f:
        f.write(f'tls {{\n  cert_file: "{cert}"\n  key_file: "{key}"\n}}\n')
    server = EmbeddedNats(tmp_path / "nats", extra_args=["-c", str(conf)])
    url = server.start().replace("nats://", "tls://")
    env = {"JPU_NATS_USER": "notifier", "JPU_NATS_PASSWORD": passwords["notifier"]}

    async def probe() -> None:
        options = auth.client_options(env, tls_files=(str(cert), "", ""))
        assert "tls" in options
        nc = await nats.connect(url, allow_reconnect=False, **options)
        await nc.close()
        with pytest.raises((nats.errors.Error, OSError, ssl.SSLError)):
            await nats.connect(
                url, allow_reconnect=False, max_reconnect_attempts=0, **auth.client_options(env)
            )

    try:
        asyncio.run(probe())
    finally:
        server.stop()


def test_SEC2_passwords_are_ones_nats_reads_back_as_strings(tmp_path: Path) -> None:
    """A token_urlsafe password such as `2026-01-02…` lexes as a date in NATS's config (a `$VAR`
    reference in compose's nats-auth.conf): the server exited 1 at random. Generated passwords
    are letters then hex; an older stored one of another form is replaced."""
    path = tmp_path / "secrets" / "nats.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"users": {"admin": "2026-01-02T03:04:05Z-x", "gateway": "ok"}}))
    users = auth.ensure_secrets(path)
    assert all(auth.SAFE_PASSWORD.fullmatch(pw) for pw in users.values()), users
    assert auth.ensure_secrets(path) == users  # kept from then on
