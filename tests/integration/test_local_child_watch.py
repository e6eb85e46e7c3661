"""SPEC X9 — the local backend's children are awaited on the event loop through one pidfd each
(jpu.backends.process.watch_children_by_pidfd), not by a thread blocked in `waitpid` per child:
a burst of starts must not be a burst of threads. Real processes; exit codes and signals still
reach `Process.wait()` as asyncio reports them."""

from __future__ import annotations

import asyncio
import signal
import threading

from jpu.backends import process as proc_


async def test_X9_children_awaited_without_a_thread_each() -> None:
    proc_.watch_children_by_pidfd()
    threads = threading.active_count()
    gate = "read _"  # each child waits on its stdin: all 16 are alive at once
    children = [
        await asyncio.create_subprocess_exec(
            "/bin/sh", "-c", f"{gate}; exit {i}", stdin=asyncio.subprocess.PIPE
        )
        for i in range(16)
    ]
    assert threading.active_count() == threads  # 16 children alive, no thread for any
    for child in children:
        assert child.stdin is not None
        child.stdin.write(b"go\n")
        await child.stdin.drain()
    codes = await asyncio.wait_for(asyncio.gather(*(c.wait() for c in children)), 30)
    assert codes == list(range(16))
    killed = await asyncio.create_subprocess_exec("/bin/sleep", "60")
    killed.send_signal(signal.SIGKILL)
    assert await asyncio.wait_for(killed.wait(), 30) == -signal.SIGKILL
    assert threading.active_count() == threads
