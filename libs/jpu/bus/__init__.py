"""The event bus over NATS JetStream (SPEC E2, E5, E6, O5).

bus = await EventBus.connect(url, stream="JPU", prefix="jpu", name="dispatcher")
await bus.ensure_stream()
seq = await bus.append(event, expected_last_subject_seq=last)   # ConcurrencyConflict
await bus.consume("accounting", handler, stop=stop_event)       # at-least-once, parks poison
"""

from jpu.bus.client import EventBus
from jpu.bus.errors import BusError, ConcurrencyConflict
from jpu.bus.model import Delivered, ParkedMessage

__all__ = ["BusError", "ConcurrencyConflict", "Delivered", "EventBus", "ParkedMessage"]
