"""`python -m jpu_services.slurm_agent`: the slurm-agent process (SIGTERM → drain → exit 0)."""

from jpu.runtime.service import serve_workers

if __name__ == "__main__":
    serve_workers("slurm-agent", "jpu_services.slurm_agent")
