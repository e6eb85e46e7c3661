"""Stream configuration from proto-schemas/streams.json (SPEC E2, O3) and create-or-update."""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path
from typing import Any

from nats.js import JetStreamContext
from nats.js.api import StreamConfig
from nats.js.errors import BadRequestError, NotFoundError

from jpu.bus.errors import STREAM_NAME_IN_USE, BusError

_REPO_FILE = Path(__file__).resolve().parents[3] / "proto-schemas" / "streams.json"


def streams_file() -> Path:
    """JPU_STREAMS_JSON overrides the file (installs without the repository tree)."""
    return Path(os.environ.get("JPU_STREAMS_JSON") or _REPO_FILE)


@cache
def _load(path: Path) -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise BusError(f"cannot read stream configuration {path}: {e}") from e
    return data


def _fill(value: Any, stream: str, prefix: str) -> Any:
    if isinstance(value, str):
        return value.replace("{stream}", stream).replace("{prefix}", prefix)
    if isinstance(value, list):
        return [_fill(v, stream, prefix) for v in value]
    return value


def stream_config(kind: str, stream: str, prefix: str, replicas: int | None) -> StreamConfig:
    """`kind` is "event_stream" or "dlq_stream"; placeholders filled, replicas overridden."""
    raw = {
        k: _fill(v, stream, prefix)
        for k, v in _load(streams_file())[kind].items()
        if not k.startswith("$")
    }
    env_replicas = os.environ.get("JPU_STREAM_REPLICAS")
    if replicas is None and env_replicas:
        replicas = int(env_replicas)
    if replicas is not None:
        raw["num_replicas"] = replicas
    return StreamConfig.from_response(raw)  # converts nanosecond durations to seconds


def bucket_replicas() -> int:
    """Copies of each KV / object-store bucket (views, the dispatcher lease, snapshots): as many
    as the event stream's (JPU_STREAM_REPLICAS), so losing one node of a cluster loses none of
    them (SPEC O3)."""
    return int(os.environ.get("JPU_STREAM_REPLICAS") or 1)


def consumer_defaults() -> dict[str, Any]:
    return dict(_load(streams_file()).get("consumer_defaults", {}))


async def ensure(js: JetStreamContext, config: StreamConfig) -> None:
    """Idempotent create-or-update; safe when several services start at once."""
    assert config.name
    try:
        await js.stream_info(config.name)
    except NotFoundError:
        try:
            await js.add_stream(config)
            return
        except BadRequestError as e:
            if e.err_code != STREAM_NAME_IN_USE:  # lost a creation race: update below
                raise
    await js.update_stream(config)
