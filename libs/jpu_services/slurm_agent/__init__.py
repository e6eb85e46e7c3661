"""The slurm-agent service (SPEC E4, §5): runs dispatches, watches, cancels, reports inventory."""
