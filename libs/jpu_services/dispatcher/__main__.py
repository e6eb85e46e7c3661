"""`python -m jpu_services.dispatcher`: the dispatcher process (SIGTERM → drain → exit 0)."""

from jpu.runtime.service import serve_workers

if __name__ == "__main__":
    serve_workers("dispatcher", "jpu_services.dispatcher")
