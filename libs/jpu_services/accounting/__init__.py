"""The accounting service (SPEC E4): charges usage (§3) and owns the lab usage projection."""
