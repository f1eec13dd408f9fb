"""On a real server: the Python stubs hold the serving code and nothing else.

Issue 23 measured ``cygrpc`` (the gRPC client) mapped in four serving stubs, pulled
in by tooling imports; the serving package now imports none. Read from each stub's
memory map once the server is ready (each step is built in ``initialize``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kyc_tools.operator.procs import STUB_PROGRAM, children, stub_instance

pytestmark = pytest.mark.integration

# Shared objects that only the gRPC client or plotting libraries bring.
FOREIGN = ("cygrpc", "matplotlib", "_grpc", "libgrpc")


def stub_pids(server_pid: int) -> list[int]:
    pids = []
    for pid in children(server_pid):
        try:
            argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
        except OSError:
            continue
        if argv0.decode(errors="replace").endswith(STUB_PROGRAM):
            pids.append(pid)
    return pids


def test_no_python_stub_maps_the_grpc_client_or_plotting_libraries(server):
    # every step is built in initialize: a ready server's stubs hold all they import
    stubs = stub_pids(server.process.pid)
    assert len(stubs) >= 6, "expected a stub per Python model instance"
    found = {}
    for pid in stubs:
        maps = Path(f"/proc/{pid}/maps").read_text()
        foreign = sorted({word for word in FOREIGN if word in maps})
        if foreign:
            found[stub_instance(pid)] = foreign
    assert found == {}
