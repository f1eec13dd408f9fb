"""What the server says of one level: Triton's statistics API per model (queue and
compute times over the window), and the server process's CPU time and memory."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kyc_tools.dev.bench.measure import StatsReader
from kyc_tools.dev.bench.options import CLIENT_TIMEOUT_S
from kyc_tools.dev.bench.procmem import resident_union_mib
from kyc_tools.operator.procs import children, process_tree, stub_instance

log = logging.getLogger(__name__)
STAGES = ("queue", "compute_input", "compute_infer", "compute_output")


# -- statistics API ------------------------------------------------------------------
def stats_totals(stats: Mapping[str, Any]) -> dict[str, int]:
    """Cumulative counters of a model (summed over its versions) from
    ``get_inference_statistics(..., as_json=True)``: executions, inferences,
    successful requests, and each stage's count and nanoseconds."""
    totals = {"executions": 0, "inferences": 0, "requests": 0}
    totals |= {f"{s}_{k}": 0 for s in STAGES for k in ("count", "ns")}
    for entry in stats.get("model_stats", []):
        totals["executions"] += int(entry.get("execution_count", 0))
        totals["inferences"] += int(entry.get("inference_count", 0))
        inference = entry.get("inference_stats", {})
        totals["requests"] += int(inference.get("success", {}).get("count", 0))
        for stage in STAGES:
            totals[f"{stage}_count"] += int(inference.get(stage, {}).get("count", 0))
            totals[f"{stage}_ns"] += int(inference.get(stage, {}).get("ns", 0))
    return totals


def model_stats(before: Mapping[str, Mapping[str, int]], after: Mapping[str, Mapping[str, int]]
                ) -> dict[str, dict[str, Any]]:
    """Per model over a window: requests, executions, inferences, and each stage's
    mean time per request in microseconds (None when it had none)."""
    figs: dict[str, dict[str, Any]] = {}
    for model in after:
        delta = {k: after[model][k] - before.get(model, {}).get(k, 0) for k in after[model]}
        if min(delta.values()) < 0:
            log.warning("%s: statistics went back (the model was reloaded?)", model)
        row: dict[str, Any] = {k: delta[k] for k in ("requests", "executions", "inferences")}
        for stage in STAGES:
            count = delta[f"{stage}_count"]
            row[f"{stage}_us"] = round(delta[f"{stage}_ns"] / count / 1e3, 1) if count > 0 \
                else None
        figs[model] = row
    return figs


def server_times(before: Mapping[str, Mapping[str, int]], after: Mapping[str, Mapping[str, int]],
                 entry: str, steps: Sequence[str]) -> dict[str, float] | None:
    """Each stage's time per ``entry`` request, summed over its pipeline steps
    (microseconds): what perf_analyzer reports as Server Queue / Compute *."""
    if entry not in after or not all(s in after for s in steps):
        return None
    requests = after[entry]["requests"] - before.get(entry, {}).get("requests", 0)
    if requests <= 0:
        return None
    return {stage: round(sum(after[s][f"{stage}_ns"] - before.get(s, {}).get(f"{stage}_ns", 0)
                             for s in steps) / requests / 1e3, 1) for stage in STAGES}


def stats_reader(client: Any, models: Sequence[str]) -> StatsReader:
    """Reads the cumulative counters of ``models`` with an aio gRPC client."""

    async def read() -> dict[str, dict[str, int]]:
        return {m: stats_totals(await client.get_inference_statistics(
            model_name=m, as_json=True, client_timeout=CLIENT_TIMEOUT_S)) for m in models}

    return read


# -- server memory ---------------------------------------------------------------------
def _kib(path: Path, key: str) -> int:
    with contextlib.suppress(OSError):
        for line in path.read_text().splitlines():
            if line.startswith(f"{key}:"):
                return int(line.split()[1])
    return 0


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its child processes (the server and its
    Python stubs), from /proc; 0 for processes gone."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for each in (pid, *children(pid)):
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = Path(f"/proc/{each}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return total


def process_memory(pid: int) -> dict[str, Any]:
    """Resident (RSS) and proportional (PSS: shared pages divided among their users)
    memory of ``pid`` and all its descendants (Triton's Python stubs), in MiB."""
    tree = process_tree(pid)
    rows = [{"pid": p, "name": (Path(f"/proc/{p}/comm").read_text().strip()
                                if Path(f"/proc/{p}/comm").exists() else "?"),
             "rss": _kib(Path(f"/proc/{p}/status"), "VmRSS"),
             "pss": _kib(Path(f"/proc/{p}/smaps_rollup"), "Pss")} for p in tree]
    server = next(r for r in rows if r["pid"] == pid)
    stubs = [r for r in rows if r["pid"] != pid]
    return {
        "server_rss_mib": round(server["rss"] / 1024, 1),
        "stubs_rss_mib": round(sum(r["rss"] for r in stubs) / 1024, 1),
        "total_rss_mib": round(sum(r["rss"] for r in rows) / 1024, 1),
        "total_pss_mib": round(sum(r["pss"] for r in rows) / 1024, 1),
        # Distinct pages: shared libraries and tensor shared memory counted once.
        "resident_mib": resident_union_mib(r["pid"] for r in rows),
        "stub_processes": len(stubs),
        "stubs": sorted(({"instance": stub_instance(r["pid"]),
                          "rss_mib": round(r["rss"] / 1024, 1),
                          "pss_mib": round(r["pss"] / 1024, 1)} for r in stubs),
                        key=lambda r: -r["rss_mib"]),
    }
