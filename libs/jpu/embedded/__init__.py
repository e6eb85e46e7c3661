"""Embedded servers for a fresh machine (SPEC O2): real binaries the project installs itself."""

from jpu.embedded.nats import EmbeddedNats, EmbeddedNatsError, find_nats_server, free_port

__all__ = ["EmbeddedNats", "EmbeddedNatsError", "find_nats_server", "free_port"]
