"""The operator commands: each is `python -m jpu.tools.<name>` (jpu-admin is `tools.admin`).

admin.py          jpu-admin: labs, users, API tokens, maintenance, usage statements
admin_usage.py    jpu-admin explain-usage / usage-statement (SPEC F5)
replay.py         the audit replay: rebuild every projection and compare (SPEC E6)
schemas.py        proto-schemas/ written from and checked against the event structs (SPEC E1)
backfill_stub.py  the demo's OpenAI-compatible stand-in for the LLM backfill command (SPEC B1)
"""
