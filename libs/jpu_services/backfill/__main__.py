"""`python -m jpu_services.backfill`: the backfill process (SIGTERM → drain → exit 0)."""

from jpu.runtime.service import serve_workers

if __name__ == "__main__":
    serve_workers("backfill", "jpu_services.backfill")
