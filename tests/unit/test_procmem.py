"""resident_union_mib: pages shared by two processes are counted once;
resident_by_kind: where a process's resident pages lie."""

from __future__ import annotations

import mmap
import os
import re
import signal
from pathlib import Path

import pytest

from kyc_tools.dev.bench.procmem import resident_by_kind, resident_union_mib

SIZE = 64 * 2**20


def rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) / 1024


@pytest.mark.skipif(os.geteuid() != 0, reason="page frame numbers are readable by root only")
def test_a_shared_region_mapped_by_two_processes_counts_once():
    shared = mmap.mmap(-1, SIZE, flags=mmap.MAP_SHARED)
    shared.write(b"x" * SIZE)  # resident in this process
    ready_r, ready_w = os.pipe()
    child = os.fork()
    if child == 0:  # touch every page of the same region, then wait to be measured
        total = sum(shared[i] for i in range(0, SIZE, mmap.PAGESIZE))
        os.write(ready_w, b"1" if total else b"0")
        signal.pause()
    try:
        assert os.read(ready_r, 1) == b"1"
        union = resident_union_mib([os.getpid(), child])
        summed = rss_mib(os.getpid()) + rss_mib(child)
        assert union is not None
        assert summed - union >= 0.9 * SIZE / 2**20  # the region once, not twice
        assert union >= SIZE / 2**20
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
        shared.close()


def test_a_process_that_is_gone_gives_no_figure():
    assert resident_union_mib([2**22 + 12345]) is None


def test_pages_of_a_dev_shm_region_count_as_shm_and_of_a_private_mapping_as_anon():
    # fresh mappings, written: pages the process cannot have had resident before (a
    # bytearray could reuse heap pages freed earlier in the same process)
    name = Path(f"/dev/shm/kyc-procmem-{os.getpid()}")
    before = resident_by_kind(os.getpid())
    own = mmap.mmap(-1, SIZE, flags=mmap.MAP_PRIVATE)
    own.write(b"z" * SIZE)
    with name.open("w+b") as f:
        f.truncate(SIZE)
        region = mmap.mmap(f.fileno(), SIZE)
        region.write(b"y" * SIZE)
        try:
            after = resident_by_kind(os.getpid())
            assert after["shm"] - before["shm"] >= 0.9 * SIZE / 2**20
            assert after["anon"] - before["anon"] >= 0.9 * SIZE / 2**20
            assert abs(after["file"] - before["file"]) < 0.5 * SIZE / 2**20
        finally:
            region.close()
            own.close()
            name.unlink()
    assert resident_by_kind(2**22 + 12345) == {}
