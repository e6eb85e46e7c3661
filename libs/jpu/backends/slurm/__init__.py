"""The Slurm backend (SPEC X1–X9): the Slurm CLI of 22.05+, pyslurm where it matches."""
