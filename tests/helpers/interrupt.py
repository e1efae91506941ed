"""An ingest killed mid-way: the tests that show a rerun repairs what a SIGKILL left half written."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable
from typing import Any


async def kill_once_written(process: subprocess.Popen[Any], written: Callable[[], Awaitable[int]], *,
                            at_least: int = 500, every_s: float = 0.1, within_s: float = 120) -> bool:
    """SIGKILLs `process` once `written()` passes `at_least` (or it ends on its own); True if it was still running,
    that is, killed mid-way."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if await written() > at_least or process.poll() is not None:
            break
        await asyncio.sleep(every_s)
    running = process.poll() is None
    process.send_signal(signal.SIGKILL)
    process.wait()
    return running
