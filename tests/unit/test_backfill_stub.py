"""SPEC B1/B2: the default backfill command is OpenAI-compatible and yields on SIGTERM."""

import json
import signal
import subprocess
import sys

import httpx


def test_B1_stub_serves_openai_compatible_endpoints_and_exits_on_sigterm() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "jpu.tools.backfill_stub", "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        endpoint = json.loads(proc.stdout.readline())["endpoint"]
        models = httpx.get(f"{endpoint}/models", timeout=5).json()
        assert models["data"][0]["id"] == "jpu-stub-echo"
        out = httpx.post(
            f"{endpoint}/chat/completions",
            timeout=5,
            json={"messages": [{"role": "user", "content": "abc"}]},
        ).json()
        assert out["choices"][0]["message"]["content"] == "cba"
        assert httpx.post(f"{endpoint}/completions", content=b"{", timeout=5).status_code == 400
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=5) == 0
