"""The resident memory of a group of processes, shared pages counted once.

Summing each process's RSS counts a page once per process that maps it: the
libraries every Python stub loads (libpython, numpy, onnxruntime) and the shared-
memory regions through which Triton passes tensors to its stubs (mapped by the
server and by a stub) are counted several times. PSS divides each shared page
among its users, including processes outside the group. The exact figure is the
number of distinct physical pages resident in the group: read from
``/proc/PID/pagemap``, which gives page frame numbers only to root (others read
zeros, and then this returns None). ``resident_by_kind`` tells where a process's
resident pages lie: its own memory (heap and anonymous mappings), shared memory
(``/dev/shm``: the Python backend's tensor regions) or files (libraries, weights).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np

PAGE = 4096
PRESENT = np.uint64(1 << 63)
PFN_MASK = np.uint64((1 << 55) - 1)


def _resident_ranges(pid: int) -> list[tuple[int, int]]:
    """(start, end) of the mappings of ``pid`` with resident pages (from smaps)."""
    ranges, current = [], None
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split(None, 1)[0]
        if "-" in head and not head.endswith(":"):
            start, end = (int(v, 16) for v in head.split("-"))
            current = (start, end)
        elif head == "Rss:" and current is not None and int(line.split()[1]) > 0:
            ranges.append(current)
    return ranges


def resident_by_kind(pid: int) -> dict[str, float]:
    """MiB resident in ``pid``'s mappings by kind: "anon" (heap, stacks, anonymous
    mappings: allocator arenas), "shm" (``/dev/shm`` regions) and "file"; an empty
    dict when the process is gone."""
    kib = {"anon": 0, "shm": 0, "file": 0}
    kind = "anon"
    try:
        text = Path(f"/proc/{pid}/smaps").read_text()
    except OSError:
        return {}
    for line in text.splitlines():
        head = line.split(None, 1)[0]
        if "-" in head and not head.endswith(":"):
            fields = line.split(None, 5)
            name = fields[5] if len(fields) > 5 else ""
            kind = ("shm" if name.startswith("/dev/shm/") else
                    "file" if name.startswith("/") else "anon")
        elif head == "Rss:":
            kib[kind] += int(line.split()[1])
    return {k: round(v / 1024, 1) for k, v in kib.items()}


def _frames(pid: int) -> np.ndarray:
    frames = []
    with open(f"/proc/{pid}/pagemap", "rb") as pagemap:
        for start, end in _resident_ranges(pid):
            try:
                pagemap.seek(start // PAGE * 8)
                entries = np.frombuffer(pagemap.read((end - start) // PAGE * 8), "<u8")
            except OSError:  # [vsyscall] and the like
                continue
            frames.append(entries[(entries & PRESENT) != 0] & PFN_MASK)
    return np.concatenate(frames) if frames else np.zeros(0, np.uint64)


def resident_union_mib(pids: Iterable[int]) -> float | None:
    """MiB of distinct physical pages resident in ``pids``; None without the right
    to read page frame numbers (not root) or when a process is gone."""
    try:
        frames = [_frames(pid) for pid in pids]
    except OSError:
        return None
    every = np.concatenate(frames) if frames else np.zeros(0, np.uint64)
    if every.size == 0 or not every.any():  # frame numbers hidden: all zeros
        return None
    return round(np.unique(every).size * PAGE / 2**20, 1)


def listening_pid(port: int) -> int | None:
    """The process of this machine listening on TCP ``port`` (IPv4 or IPv6), or None:
    the socket's inode from /proc/net/tcp*, then the process holding it open. A server
    in another network namespace (a container without host networking) is not found."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            # local address "HEX_IP:HEX_PORT", state 0A: LISTEN
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{fields[9]}]")
    for proc in Path("/proc").iterdir():
        if inodes and proc.name.isdigit():
            try:
                if any(os.readlink(fd) in inodes for fd in (proc / "fd").iterdir()):
                    return int(proc.name)
            except OSError:
                continue
    return None
