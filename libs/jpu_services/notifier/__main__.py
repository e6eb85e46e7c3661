"""`python -m jpu_services.notifier`: the notifier process (SIGTERM → drain → exit 0)."""

from jpu.runtime.service import serve_workers

if __name__ == "__main__":
    serve_workers("notifier", "jpu_services.notifier")
