"""CPU priority of a stub process (Linux niceness).

Triton's rate limiter decides when an execution may START; it cannot take the
cores from one already running. On a CPU machine a long OCR run and a liveness
frame then share the cores evenly. A higher niceness for the OCR stubs makes the
kernel's scheduler favour the others whenever both want the CPU, while OCR alone
still runs at full speed. Raising niceness needs no privilege.
"""

from __future__ import annotations

import os
from pathlib import Path


def lower_cpu_priority(nice: int, task_dir: Path = Path("/proc/self/task")) -> list[int]:
    """Set the niceness of every thread of this process to ``nice`` (Linux schedules
    threads, and a thread created later inherits its creator's); the thread ids set."""
    done = []
    tids = sorted(int(p.name) for p in task_dir.iterdir()) if task_dir.is_dir() else [0]
    for tid in tids:
        try:
            os.setpriority(os.PRIO_PROCESS, tid, nice)
        except (ProcessLookupError, PermissionError):  # gone, or not ours to change
            continue
        done.append(tid)
    return done
