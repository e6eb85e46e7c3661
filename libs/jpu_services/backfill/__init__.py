"""The backfill service (SPEC E4): LLM backfill on idle GPUs (§6)."""
