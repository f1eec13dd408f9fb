"""The processes of a running server: its children, and the Python stubs among them."""

from __future__ import annotations

import contextlib
from collections import Counter
from pathlib import Path

STUB_PROGRAM = "triton_python_backend_stub"


def children(pid: int) -> list[int]:
    """The pids whose parent is ``pid``."""
    kids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = (entry / "stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                    kids.append(int(entry.name))
    return kids


def stub_instance(pid: int) -> str:
    """The model instance a Python stub serves (its 9th argument, e.g. "ocr_det_0_0")."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        return args[8].decode() if len(args) > 8 else "?"
    except OSError:
        return "?"


def stubs_per_model(server_pid: int) -> Counter[str]:
    """How many live stub processes serve each model (named by the model file a stub
    was started with: ``<repository>/<model>/<version>/model.*``)."""
    counts: Counter[str] = Counter()
    for pid in children(server_pid):
        with contextlib.suppress(OSError, IndexError):
            args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if not args[0].decode(errors="replace").endswith(STUB_PROGRAM):
                continue
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue  # exited, not yet reaped
            counts[Path(args[1].decode(errors="replace")).parent.parent.name] += 1
    return counts
