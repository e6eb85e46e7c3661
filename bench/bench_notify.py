"""Notification latency (SPEC Q10): a job's end appended → its webhook message received.

    python bench/bench_notify.py [--n 200] [--poll-s 0.5]

Starts its own PostgreSQL (fsync on), NATS and a local HTTP receiver, runs the notifier as its
own process (`python -m jpu_services.notifier`), registers a user's webhook, then ends n jobs
one after the other: each `JobEnded` is appended and timed until the receiver has its POST.
Results on stdout (median, p99, max), progress on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import asyncpg

from jpu.bus import EventBus
from jpu.embedded.nats import EmbeddedNats
from jpu.embedded.postgres import EmbeddedPostgres
from jpu.events import JobEnded, JobSubmitted, NotificationSettingsChanged, new_event_id


def progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class Receiver:
    """Records when each job's message arrived (perf_counter), by job id."""

    def __init__(self) -> None:
        self.arrived: dict[str, float] = {}
        self.event = threading.Event()
        got = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                text = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["text"]
                got.arrived[text.split()[1]] = time.perf_counter()  # "Job <id> (...) ..."
                got.event.set()
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


async def run(n: int, poll_s: float, root: Path) -> list[float]:
    pg, nats = EmbeddedPostgres(root / "pg", durable=True), EmbeddedNats(root / "nats")
    dsn, url = pg.start(), nats.start()
    receiver = Receiver()
    bus = await EventBus.connect(url, stream="BENCH", prefix="bench")
    await bus.ensure_stream()
    env = {**os.environ, "JPU_NATS_URL": url, "JPU_DATABASE_URL": dsn, "JPU_STREAM_NAME": "BENCH",
           "JPU_SUBJECT_PREFIX": "bench", "JPU_NOTIFY_POLL_S": str(poll_s)}  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "jpu_services.notifier"], env=env, stderr=subprocess.DEVNULL
    )
    try:
        conn = await asyncpg.connect(dsn)
        while True:  # ready: it recorded where it starts
            try:
                if await conn.fetchval("SELECT count(*) FROM notifier_position"):
                    break
            except asyncpg.UndefinedTableError:
                pass
            await asyncio.sleep(0.1)
        await conn.close()
        await bus.append(NotificationSettingsChanged(
            event_id=new_event_id(), ts=0.0, user="u", webhook_url=receiver.url, mail_type=["END"]
        ))  # fmt: skip
        latencies = []
        for i in range(n):
            job = f"job{i:05d}"
            await bus.append(JobSubmitted(
                event_id=new_event_id(), ts=0.0, job_id=job, lab="L", user="u", name="b",
                command="true", num_gpus=1,
            ))  # fmt: skip
            end = JobEnded(
                event_id=new_event_id(), ts=1.0, job_id=job, attempt=1, state="COMPLETED",
                exit_code=0,
            )  # fmt: skip
            t0 = time.perf_counter()
            await bus.append(end)
            while job not in receiver.arrived:
                await asyncio.to_thread(receiver.event.wait, 1.0)
                receiver.event.clear()
            latencies.append(receiver.arrived[job] - t0)
            if (i + 1) % 50 == 0:
                progress(f"{i + 1}/{n}")
        return latencies
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        await bus.close()
        receiver.server.shutdown()
        nats.stop()
        pg.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--poll-s", type=float, default=0.5, help="JPU_NOTIFY_POLL_S")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-notify-"))
    root.chmod(0o755)
    try:
        lat = sorted(asyncio.run(run(args.n, args.poll_s, root)))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    ms = [x * 1000 for x in lat]
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    print(f"job end → webhook received, n={len(ms)}: median {statistics.median(ms):.1f} ms, "
          f"p99 {p99:.1f} ms, max {ms[-1]:.1f} ms")  # fmt: skip


if __name__ == "__main__":
    main()
