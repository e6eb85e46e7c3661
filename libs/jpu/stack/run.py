"""`python -m jpu.stack run`: servers → preparation → services → ready banner → supervise."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from jpu.backends.local.stop import terminate_all
from jpu.config import ConfigError, load_config
from jpu.runtime.service import install_stop_signals
from jpu.stack import discover, metrics_targets, private
from jpu.stack.mailsink import MailSink
from jpu.stack.prepare import prepare
from jpu.stack.servers import Servers, start_servers
from jpu.stack.supervisor import Supervisor
from jpu.tools.admin import DemoUser

log = logging.getLogger("jpu.stack")
# SPEC O2: Ctrl-C leaves no process behind. Local jobs and backfill run in their own sessions
# (they survive a service restart within the stack); the stack ends them when it stops.
LOCAL_JOBS_GRACE_S = 5.0


async def wait_ready(
    url: str, stop: asyncio.Event, timeout_s: float, token: str | None = None
) -> bool:
    """Poll `url` (with `token`, if given) until it answers 200; False on timeout or stop."""
    deadline = time.monotonic() + timeout_s
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(timeout=2.0, headers=headers) as client:
        while time.monotonic() < deadline and not stop.is_set():
            with contextlib.suppress(httpx.HTTPError):
                if (await client.get(url)).status_code == 200:
                    return True
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.3)
    return False


def banner(
    gateway: str, servers: Servers, log_dir: Path, users: list[DemoUser], mail: Path | None = None
) -> str:
    sink = [f"  e-mail          {mail}/new/ (a local sink: nothing leaves)"] if mail else []
    lines = [
        f"JPU-Share is up: {gateway}",
        f"  NATS JetStream  {servers.nats_url}" + ("  (embedded)" if servers.nats else ""),
        f"  PostgreSQL      {servers.database_url}" + ("  (embedded)" if servers.postgres else ""),
        f"  service logs    {log_dir}/<service>.log",
        f"  metrics         {log_dir.parent / metrics_targets.FILE} (Prometheus file_sd)",
        *sink,
        "",
        "Demo users and tokens (DEMO ONLY - well-known, do not use in production):",
        *(f"  {u.name:<10} {u.lab:<4} {u.role:<6} {u.token}" for u in users),
        "",
        f"Try:  curl -H 'Authorization: Bearer {users[0].token}' {gateway}/v1/me",
        "Ctrl-C stops everything.",
    ]
    return "\n".join(lines)


async def run(
    env: Mapping[str, str], servers: Servers, data_dir: Path, ready_timeout_s: float = 60.0
) -> int:
    """Everything after the servers: they are started and stopped by `main` (main thread)."""
    stop = asyncio.Event()
    install_stop_signals(stop)
    supervisor: Supervisor | None = None
    sink: MailSink | None = None
    local = False
    try:
        child_env = {
            **env,
            "JPU_NATS_URL": servers.nats_url,
            "JPU_DATABASE_URL": servers.database_url,
        }
        config = load_config(env=child_env)
        if (outputs := private.prepare_output_root(config, child_env)) is not None:  # SEC1
            child_env["JPU_AGENT_OUTPUT_ROOT"] = str(outputs)  # gateway and agents agree
        local = config.slurm_backend == "local"
        if not config.smtp_host:  # Q10: the demo's e-mail lands in <data_dir>/mail, visibly
            sink = MailSink(data_dir / "mail")
            await asyncio.to_thread(sink.start)  # waits until it answers
            child_env.update(sink.env())
        users = await prepare(config, demo=True)  # `make run` is the demo (SPEC SEC3)
        supervisor = Supervisor(child_env, data_dir / "logs", identity=servers.nats_env)
        taken = {config.gateway_port, *_ports(servers), *([sink.port] if sink else [])}
        metrics_targets.assign(supervisor.children, data_dir, taken)  # SPEC O4: /metrics per child
        supervisor.start(stop)
        gateway = f"http://{config.gateway_host}:{config.gateway_port}"
        # ready, and the demo identities folded by the projector (SEC3: they are events)
        if await wait_ready(f"{gateway}/readyz", stop, ready_timeout_s) and await wait_ready(
            f"{gateway}/v1/me", stop, ready_timeout_s, token=users[0].token
        ):
            mail = sink.maildir if sink else None
            print(banner(gateway, servers, data_dir / "logs", users, mail), flush=True)
        elif not stop.is_set():
            log.error(
                "gateway not ready; see its log",
                extra={"timeout_s": ready_timeout_s, "log": str(data_dir / "logs" / "gateway.log")},
            )
        await stop.wait()
        return 0
    finally:
        if supervisor is not None:
            await supervisor.stop()
            if local:  # only once no agent can re-adopt them: the services have exited
                await asyncio.to_thread(terminate_all, data_dir, LOCAL_JOBS_GRACE_S)
        if sink is not None:
            await asyncio.to_thread(sink.stop)


def _ports(servers: Servers) -> set[int]:
    """The local ports of the stack's NATS and PostgreSQL (a URL without one has none here)."""
    ports = set()
    for url in [*servers.nats_url.split(","), servers.database_url]:
        with contextlib.suppress(ValueError):
            if port := urlsplit(url.strip()).port:
                ports.add(port)
    return ports


def _check_port_free(host: str, port: int) -> None:
    """Fail fast with the fix, rather than a gateway that crash-loops on a taken port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            raise RuntimeError(
                f"gateway port {host}:{port} is not free ({e.strerror}); "
                f"set JPU_GATEWAY_PORT to another port"
            ) from e


def urls(servers: Servers, gateway: str | None = None) -> dict[str, str]:
    urls = {"nats_url": servers.nats_url, "database_url": servers.database_url}
    return {**urls, "gateway": gateway} if gateway else urls


def _interrupt(signum: int, _: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main(env: Mapping[str, str] | None = None) -> int:
    """Servers start and stop in the main thread: the embedded PostgreSQL is tied to the thread
    that started it (pdeathsig), and a signal while they start must still stop them."""
    env = dict(os.environ if env is None else env)
    timeout = float(env.get("JPU_READY_TIMEOUT_S", "60"))
    signal.signal(signal.SIGTERM, _interrupt)  # like Ctrl-C until the event loop takes over
    servers: Servers | None = None
    try:
        config = load_config(env=env)
        _check_port_free(config.gateway_host, config.gateway_port)
        data_dir = Path(config.data_dir).absolute()
        private.make_private(data_dir)  # SPEC SEC1: no job account enters it
        servers = start_servers(data_dir, env, config.stream_name, config.subject_prefix)
        os.environ.update(servers.nats_env("admin"))  # prepare runs as the admin (SPEC SEC2)
        gateway = f"http://{config.gateway_host}:{config.gateway_port}"
        discover.record(data_dir, urls(servers, gateway))  # for jpu-admin on this checkout
        return asyncio.run(run(env, servers, data_dir, timeout))
    except KeyboardInterrupt:
        return 130
    except (RuntimeError, ConfigError) as e:  # an expected failure: the message says what to do
        print(f"jpu stack: {e}", file=sys.stderr)
        return 1
    except Exception as e:
        log.exception("stack failed")
        print(f"jpu stack: {e}", file=sys.stderr)
        return 1
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):  # a second Ctrl-C must not abort cleanup
            signal.signal(sig, signal.SIG_IGN)
        if servers is not None:
            discover.forget(data_dir)
            servers.stop()
        log.info("stack stopped")
