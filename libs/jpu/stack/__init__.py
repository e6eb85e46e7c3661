"""`make run`: the whole platform from one command, no Docker (SPEC O2).

`python -m jpu.stack run` starts (or reuses) NATS JetStream and PostgreSQL, prepares the stream,
schema, inventory and demo users, then runs and supervises the seven services as child processes.
`python -m jpu.stack servers` starts only NATS + PostgreSQL and prints their URLs.
"""
