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


def process_tree(pid: int) -> list[int]:
    """``pid`` and every process descended from it (a server and its Python stubs)."""
    tree, todo = [], [pid]
    while todo:
        tree.append(todo.pop())
        todo += children(tree[-1])
    return tree


def stub_instance(pid: int) -> str:
    """The model instance a Python stub serves (its 9th argument, e.g. "ocr_det_0_0")."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        return args[8].decode() if len(args) > 8 else "?"
    except OSError:
        return "?"


def is_running(pid: int) -> bool:
    """True while ``pid`` exists and has not exited (a zombie not yet reaped has)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def stub_files(server_pid: int) -> list[Path]:
    """The model file each live stub process of the server was started with
    (``<repository>/<model>/<version>/model.*``)."""
    files = []
    for pid in children(server_pid):
        with contextlib.suppress(OSError, IndexError):
            args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if args[0].decode(errors="replace").endswith(STUB_PROGRAM) and is_running(pid):
                files.append(Path(args[1].decode(errors="replace")))
    return files


def stubs_per_model(server_pid: int) -> Counter[str]:
    """How many live stub processes serve each model (named by the model file a stub
    was started with: ``<repository>/<model>/<version>/model.*``)."""
    return Counter(path.parent.parent.name for path in stub_files(server_pid))
