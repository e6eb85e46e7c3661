"""`python -m jpu_services.intake`: the intake process (SIGTERM → drain → exit 0)."""

from jpu.service import serve_workers

if __name__ == "__main__":
    serve_workers("intake", "jpu_services.intake")
