"""`python -m jpu_services.accounting`: the accounting process (SIGTERM → drain → exit 0)."""

from jpu.runtime.service import serve_workers

if __name__ == "__main__":
    serve_workers("accounting", "jpu_services.accounting")
