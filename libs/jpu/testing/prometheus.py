"""A real Prometheus for tests (SPEC O4): Debian's `prometheus` binary run by the test itself.

Its own config, TSDB in a temporary directory and a free port — never the package's system
daemon (scripts/install-prometheus keeps that one from starting). A machine without the binary
skips the test with the reason; JPU_TEST_PROMETHEUS_REQUIRED=1 (CI) makes that a failure.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from jpu.embedded.base import free_port
from jpu.testing.unavailable import skip_unless_required

READY_TIMEOUT_S = 30.0


def prometheus_or_skip() -> str:
    found = os.environ.get("JPU_PROMETHEUS_BIN") or shutil.which("prometheus")
    if found is None and os.access("/usr/bin/prometheus", os.X_OK):
        found = "/usr/bin/prometheus"
    if found is not None:
        return found
    skip_unless_required("prometheus", "no prometheus binary (run scripts/install-prometheus)")


class Prometheus:
    """`prometheus` scraping what `scrape_configs` lists every `interval_s`; stop() ends it."""

    def __init__(
        self, binary: str, workdir: Path, scrape_configs: list[dict[str, Any]], interval_s: float
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.workdir = workdir
        interval = f"{int(interval_s * 1000)}ms"
        config = {
            "global": {
                "scrape_interval": interval,
                "scrape_timeout": interval,
                "evaluation_interval": interval,
            },
            "scrape_configs": scrape_configs,
        }
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        self._log = open(workdir / "prometheus.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [
                binary,
                f"--config.file={workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self._log,
            stderr=self._log,
            start_new_session=True,
        )
        self.http = httpx.Client(base_url=self.url, timeout=5.0)

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                if self.http.get("/-/ready").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        pytest.fail(f"prometheus not ready (rc={self.proc.returncode}):\n{self.log_tail()}")

    def query(self, expr: str) -> list[dict[str, Any]]:
        """GET /api/v1/query: the instant vector's samples ({metric, value: [ts, "str"]})."""
        r = self.http.get("/api/v1/query", params={"query": expr})
        body = r.json()
        assert r.status_code == 200 and body["status"] == "success", (expr, r.text)
        assert body["data"]["resultType"] == "vector", body
        return list(body["data"]["result"])

    def values(self, expr: str, label: str) -> dict[str, float]:
        """The query's samples as {value of `label`: float value}."""
        return {s["metric"].get(label, ""): float(s["value"][1]) for s in self.query(expr)}

    def targets(self) -> list[dict[str, Any]]:
        r = self.http.get("/api/v1/targets", params={"state": "active"})
        return list(r.json()["data"]["activeTargets"])

    def log_tail(self) -> str:
        self._log.flush()
        return (self.workdir / "prometheus.log").read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        self.http.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log.close()
