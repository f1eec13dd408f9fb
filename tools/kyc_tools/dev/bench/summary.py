"""The report of a ``kyc bench`` run: headline figures, the goals they are judged
against, the table printed, and the JSON written."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from kyc_tools.dev.bench.options import (
    BATCHING_SPEEDUP_LEVEL,
    GROUPS,
    LIVENESS_GOAL_SESSIONS,
    BenchOptions,
)

# -- the report ----------------------------------------------------------------------
COMPARED = (
    "served: a real Triton server (Python-based onnxruntime backend on CPU, each ONNX "
    "model on the CPU runtime its config names: OpenVINO, or onnxruntime) in explicit "
    "model-control mode, closed loops per concurrency level: NVIDIA's perf_analyzer "
    "2.51.0 for the stateless scenarios (kyc_ensemble, document_ocr, the batching models: "
    "its count windows and CSV; each input also sent once through the SDK to score the "
    "answers), asyncio gRPC clients for liveness (they answer the random challenge) and "
    "background load, answers counted over a fixed window after a warm-up; "
    "in process: the same kyc code "
    "and ONNX files without Triton, on the same CPU runtimes and thread settings, "
    "batches of min(concurrency, max_batch_size); batching off: the model reloaded "
    "through the model-control API with its config less dynamic_batching; peers: other "
    "software in process, one request at a time, with its own defaults"
)
QUALITY_KEYS = ("mrz_exact_rate", "fields_exact_rate", "field_accuracy", "valid_rate")
GOALS = {
    # name: (target, "min" (value >= target) or "max" (value <= target), what)
    # The targets are issue 24's raised goals (docs/performance.md says where they stand).
    "served_vs_inprocess_throughput": (0.95, "min", "best kyc_ensemble throughput / best "
                                                   "kyc_in_process throughput"),
    # dynamic_batching_speedup (on / off) stays a top-level figure; its old goal (>= 1.5)
    # is retired: onnxruntime's own batching ceiling on these cores is about 1.0-1.4x.
    # What batching is judged by: how much of that ceiling the server delivers.
    "batching_gain_vs_ceiling": (0.95, "min", "face_embedding's served gain from dynamic "
                                              "batching at concurrency 16 (on / off) over "
                                              "onnxruntime's in-process ceiling (batch 16 "
                                              "vs 1), same run"),
    "kyc_ensemble_p95_ms_at_1": (500.0, "max", "kyc_ensemble p95 latency, one client"),
    "kyc_ensemble_best_per_s": (2.0, "min", "kyc_ensemble's best throughput over the "
                                            "concurrency levels, customers per second"),
    "liveness_p95_ms_at_8": (150.0, "max", "liveness per-frame p95 latency, 8 sessions"),
    "document_latency_vs_peer": (0.5, "max", "document_ocr p50 latency / the peer's, one "
                                             "document at a time"),
    "document_mrz_exact_minus_peer": (0.0, "min", "our MRZ exact-match rate minus the peer's"),
    "server_memory_resident_mib": (2048.0, "max", "resident memory of tritonserver and its "
                                                  "stubs after the load scenarios, MiB: "
                                                  "distinct pages (shared ones once), or the "
                                                  "sum of RSS where pagemap is not readable"),
}


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None or denominator <= 0 \
            or not math.isfinite(numerator) or not math.isfinite(denominator):
        return None
    return round(numerator / denominator, 3)


def machine() -> dict[str, Any]:
    """The machine, and how busy it is (other work on it skews the figures)."""
    return {"cpu_count": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform(), "load_average_1m": round(os.getloadavg()[0], 2)}


def _levels(scenarios: Mapping[str, Mapping[str, Any]], name: str) -> list[Mapping[str, Any]]:
    return list(scenarios.get(name, {}).get("levels", []))


def best_rate(scenarios: Mapping[str, Mapping[str, Any]], name: str) -> float | None:
    rates = [row["per_s"] for row in _levels(scenarios, name)]
    return max(rates) if rates else None


def at_level(scenarios: Mapping[str, Mapping[str, Any]], name: str, concurrency: int
             ) -> Mapping[str, Any] | None:
    return next((row for row in _levels(scenarios, name) if row["concurrency"] == concurrency),
                None)


def _latency(row: Mapping[str, Any] | None, key: str) -> float | None:
    return None if row is None else row["latency_ms"][key]


def headline(scenarios: Mapping[str, Mapping[str, Any]], memory: Mapping[str, Any],
             extra: Mapping[str, Any] | None = None) -> dict[str, float | None]:
    """Each goal's measured value (None where its scenarios did not run)."""
    on = at_level(scenarios, "face_embedding_batching_on", BATCHING_SPEEDUP_LEVEL)
    off = at_level(scenarios, "face_embedding_batching_off", BATCHING_SPEEDUP_LEVEL)
    speedup = ratio(on and on["per_s"], off and off["per_s"])
    ceiling = ((extra or {}).get("batching_ceiling_in_process") or {}).get(
        "face_embedding", {}).get("ceiling")
    ours = at_level(scenarios, "document_ocr", 1)
    peer = at_level(scenarios, "document_peer_rapidocr", 1)
    exact = None
    if ours is not None and peer is not None and "mrz_exact_rate" in ours \
            and "mrz_exact_rate" in peer:
        exact = round(ours["mrz_exact_rate"] - peer["mrz_exact_rate"], 3)
    return {
        "served_vs_inprocess_throughput": ratio(best_rate(scenarios, "kyc_ensemble"),
                                                best_rate(scenarios, "kyc_in_process")),
        "dynamic_batching_speedup": speedup,
        "batching_gain_vs_ceiling": ratio(speedup, ceiling),
        "cpu_seconds_per_customer": (at_level(scenarios, "kyc_ensemble", 1) or {}).get(
            "server_cpu_s_per_request"),
        "kyc_ensemble_p95_ms_at_1": _latency(at_level(scenarios, "kyc_ensemble", 1), "p95"),
        "kyc_ensemble_best_per_s": best_rate(scenarios, "kyc_ensemble"),
        "liveness_p95_ms_at_8": _latency(at_level(scenarios, "liveness_sequence",
                                                  LIVENESS_GOAL_SESSIONS), "p95"),
        "document_latency_vs_peer": ratio(_latency(ours, "p50"), _latency(peer, "p50")),
        "document_mrz_exact_minus_peer": exact,
        "server_memory_resident_mib": memory.get("resident_mib") or memory.get("total_rss_mib"),
    }


def goals(values: Mapping[str, float | None]) -> dict[str, dict[str, Any]]:
    out = {}
    for name, (target, sense, what) in GOALS.items():
        value = values.get(name)
        met = None if value is None else (value >= target if sense == "min" else value <= target)
        out[name] = {"value": value, "target": target,
                     "sense": ">=" if sense == "min" else "<=", "met": met, "what": what}
    return out


def document_reading(scenarios: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Ours and the peer's document reading at concurrency 1, side by side."""
    table: dict[str, dict[str, Any]] = {}
    for name in ("document_ocr", "document_peer_rapidocr"):
        if name not in scenarios:
            continue
        if "skipped" in scenarios[name]:
            table[name] = {"skipped": scenarios[name]["skipped"]}
            continue
        row = at_level(scenarios, name, 1)
        if row is not None:
            table[name] = {**{k: row[k] for k in QUALITY_KEYS if k in row},
                           "per_s": row["per_s"], "p50_ms": row["latency_ms"]["p50"],
                           "p95_ms": row["latency_ms"]["p95"], "documents": row["requests"]}
    return table


def summarize(scenarios: Mapping[str, Mapping[str, Any]], options: BenchOptions,
              started_at: datetime, host: Mapping[str, Any],
              memory: Mapping[str, Any] | None = None,
              extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The JSON report: the contract's two ratios at the top, every goal with its
    measured value, the scenarios level by level, the server's memory."""
    memory = dict(memory or {})
    values = headline(scenarios, memory, extra)
    report = {
        "served_vs_inprocess_throughput": values["served_vs_inprocess_throughput"],
        "dynamic_batching_speedup": values["dynamic_batching_speedup"],
        # reported, no target: tritonserver's and its stubs' CPU seconds per customer at
        # concurrency 1 (perf_analyzer's whole run of that level, warm-up included)
        "cpu_seconds_per_customer": values["cpu_seconds_per_customer"],
        "goals": goals(values),
        "compared": COMPARED,
        "scenarios": {name: dict(figs) for name, figs in scenarios.items()},
        "server_memory": memory,
        "settings": {"window": dataclasses.asdict(options.window),
                     "groups": list(options.groups or GROUPS),
                     "levels": {g: list(options.levels_of(g)) for g in GROUPS},
                     "url": options.url},
        "machine": dict(host),
        "quick": options.quick,
        "started_at": started_at.isoformat(timespec="seconds"),
    }
    documents = document_reading(scenarios)
    if documents:
        report["document_reading"] = documents
    report.update(extra or {})
    return report


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _first_sight_lines(scenarios: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """What the second instrument read: each input once through the SDK, beside
    perf_analyzer's one client (kyc_tools.dev.bench.measure.first_sight_figures)."""
    lines = []
    for name, figs in scenarios.items():
        seen = figs.get("first_sight")
        if not seen or seen["latency_ms"]["p50"] is None:
            continue
        line = (f"{name}: each of its {seen['requests']} inputs once through the SDK, new to "
                f"the server: p50 {_ms(seen['latency_ms']['p50'])} ms, p99 "
                f"{_ms(seen['latency_ms']['p99'])} ms")
        if "agree" in seen:
            verdict = "agree" if seen["agree"] else (
                "DISAGREE: one of them does not measure what a client gets")
            line += (f"; perf_analyzer's p50 at 1 client / this: "
                     f"{seen['perf_analyzer_p50_at_1_over_this']} ({verdict})")
        lines.append(line)
    return lines


def format_table(report: Mapping[str, Any]) -> str:
    """A short human-readable table of the report."""
    lines = [f"{'scenario':<36} {'conc':>4} {'per s':>8} {'p50 ms':>8} {'p95 ms':>8} "
             f"{'p99 ms':>8} {'errors':>6}"]
    for name, figs in report["scenarios"].items():
        if "skipped" in figs:
            lines.append(f"{name:<36} skipped: {figs['skipped']}")
            continue
        for row in figs["levels"]:
            lat = [_ms(row["latency_ms"][p]) for p in ("p50", "p95", "p99")]
            lines.append(f"{name:<36} {row['concurrency']:>4} {row['per_s']:>8.2f} "
                         f"{lat[0]:>8} {lat[1]:>8} {lat[2]:>8} {row['errors']:>6}  "
                         f"({figs['unit']})")
    lines.extend(_first_sight_lines(report["scenarios"]))
    memory = report.get("server_memory", {})
    if "total_rss_mib" in memory:
        lines.append(f"server memory: {memory.get('resident_mib')} MiB resident "
                     f"(distinct pages), {memory['total_rss_mib']} MiB RSS summed "
                     f"({memory['total_pss_mib']} MiB proportional), "
                     f"{memory['stub_processes']} stub processes")
    if report.get("cpu_seconds_per_customer") is not None:
        lines.append(f"server CPU per customer (kyc_ensemble, one client): "
                     f"{report['cpu_seconds_per_customer']} s")
    for model, figs in report.get("batching_ceiling_in_process", {}).items():
        lines.append(f"batching ceiling in process, {model}: {figs['ceiling']}x "
                     f"({figs['ms_per_item_batch_1']} ms per item at batch 1, "
                     f"{figs['ms_per_item_batch_16']} at batch 16)")
    for model, figs in report.get("first_request_after_publish", {}).items():
        if model == "skipped":
            lines.append(f"first request after publish: skipped: {figs}")
            continue
        lines.append(f"first request after publish, {model}: "
                     f"{figs['with_warmup']['first_ms']} ms with model_warmup, "
                     f"{figs['without_warmup']['first_ms']} ms without "
                     f"(steady {figs['steady_ms']} ms)")
    for name, goal in report["goals"].items():
        verdict = {True: "met", False: "NOT met", None: "not measured"}[goal["met"]]
        lines.append(f"{name:<36} {goal['value']!s:>10} (goal {goal['sense']} "
                     f"{goal['target']}): {verdict}")
    lines.append(f"compared: {report['compared']}")
    return "\n".join(lines)


def total_errors(report: Mapping[str, Any]) -> int:
    return sum(row["errors"] + row.get("background", {}).get("errors", 0)
               for figs in report["scenarios"].values() for row in figs.get("levels", []))


def write_json(report: Mapping[str, Any], path: Path) -> None:
    path.write_text(json.dumps(report, indent=2, allow_nan=False) + "\n", encoding="utf-8")
