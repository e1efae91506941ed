"""The cores this process may use: sizes the embedders' processes and threads and `serve --workers auto`."""

from __future__ import annotations

import os


def usable_cores() -> int:
    """The cores this process may use (its CPU affinity where the platform has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
