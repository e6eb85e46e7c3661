"""Discrete-event simulator (SPEC §10): the services' policy core on a virtual clock and cluster.

from jpu.sim import SimParams, run_files
summary = run_files("config/philly-cluster.yaml", "jobs.jsonl", "out/", SimParams())
"""

from jpu.sim.params import SimParams
from jpu.sim.run import run_files, simulate
from jpu.sim.workload import WorkloadError, WorkloadJob, load_workload

__all__ = ["SimParams", "WorkloadError", "WorkloadJob", "load_workload", "run_files", "simulate"]
