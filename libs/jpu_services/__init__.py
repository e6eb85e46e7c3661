"""JPU-Share services: one process each (SPEC E4)."""
