"""The local stack's `/metrics` endpoints (SPEC O4), for a Prometheus on the same machine.

Every child of the stack gets its own free port (JPU_METRICS_PORT on 127.0.0.1: the gateways
share their API port, so that one would answer for a random gateway), and the stack writes them
as a Prometheus file-based discovery file, `<data dir>/metrics-targets.json`:

    scrape_configs:
      - job_name: jpu
        file_sd_configs: [{files: [/path/to/.jpu/metrics-targets.json]}]

Each target carries the label `service` (gateway, gateway-2, intake, dispatcher, ...).
"""

from __future__ import annotations

import json
import os
from collections.abc import Container, Iterable
from pathlib import Path

from jpu.embedded.base import free_port
from jpu.runtime.metrics_endpoint import HOST_ENV, PORT_ENV
from jpu.stack.supervisor import Child

FILE = "metrics-targets.json"
HOST = "127.0.0.1"


def assign(children: Iterable[Child], data_dir: Path, avoid: Container[int] = ()) -> Path:
    """Give each child a metrics port (kept across its restarts; never one in `avoid`, the
    ports the stack's servers will listen on) and write the targets file."""
    targets = []
    for child in children:
        port = free_port(HOST, avoid)
        child.env.update({PORT_ENV: str(port), HOST_ENV: HOST})
        targets.append({"targets": [f"{HOST}:{port}"], "labels": {"service": child.name}})
    path = data_dir / FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(targets, indent=2) + "\n")
    os.replace(tmp, path)  # Prometheus watches the file: never let it read half of one
    return path
