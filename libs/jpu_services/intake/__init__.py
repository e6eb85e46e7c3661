"""The intake service (SPEC E4): validation (Q1–Q3), personal queues, promotion (Q5)."""
