"""A tiny OpenAI-compatible inference stub: the default LLM backfill command (SPEC B1).

It lets the demo show live endpoints on idle GPUs without model weights. Real deployments set
`backfill_command` to e.g. `vllm serve <model> --port $PORT` (see README). It exits on SIGTERM
at once, as backfill must yield to research immediately (SPEC B2).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "jpu-stub-echo"


class Handler(BaseHTTPRequestHandler):
    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path in ("/health", "/v1/health"):
            self._send(200, {"status": "ok"})
        elif self.path == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]})
        else:
            self._send(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            req = json.loads(self.rfile.read(length) or b"{}")
        except json.JSONDecodeError:
            self._send(400, {"error": {"message": "invalid JSON"}})
            return
        if self.path == "/v1/completions":
            text = str(req.get("prompt", ""))[::-1]
            choice: dict[str, Any] = {"index": 0, "text": text, "finish_reason": "stop"}
        elif self.path == "/v1/chat/completions":
            last = (req.get("messages") or [{"content": ""}])[-1].get("content", "")
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": str(last)[::-1]},
                "finish_reason": "stop",
            }
        else:
            self._send(404, {"error": {"message": "not found"}})
            return
        self._send(
            200,
            {
                "id": f"stub-{time.time_ns()}",
                "object": "completion",
                "model": MODEL,
                "choices": [choice],
            },
        )

    def log_message(self, format: str, *args: Any) -> None:  # quiet: the agent keeps the log
        return


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "0")))
    args = parser.parse_args(argv)
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(json.dumps({"endpoint": f"http://{args.host}:{server.server_port}/v1"}), flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
