"""Files made from a ``kyc bench`` report: perf_analyzer-style CSVs and two PNG charts.

The report is the JSON-able dict the benchmark writes; ``report["scenarios"]`` maps a
scenario name to its ``kind`` (``served``, ``in_process`` or ``peer``), ``unit`` and,
unless it was skipped, its ``levels``: one dict per concurrency level with ``per_s``,
``latency_ms`` (p50/p90/p95/p99/avg, None when nothing was answered), ``server_us``
(queue and compute per entry request, None outside Triton) and ``model_stats`` (per
request of each model).

CSV columns
-----------
:data:`PERF_ANALYZER_COLUMNS` is the header perf_analyzer writes with ``-f FILE
--verbose-csv`` in concurrency mode, with server statistics, percentiles at their
default (no ``--percentile``), a non-decoupled model, no response cache and no
``--collect-metrics``: ``ReportWriter::GenerateReport`` in
triton-inference-server/perf_analyzer ``src/report_writer.cc`` (commit 263c5f6,
December 2025). Without ``--verbose-csv`` it stops at ``p99 latency``, as in the
example of perf_analyzer's ``docs/measurements_metrics.md``. Times are microseconds,
written as whole numbers as perf_analyzer does. Differences from perf_analyzer:

- ``Client Send``, ``Client Recv``, ``request/response`` and ``response wait`` are
  not measured by ``kyc bench``: their cells stay empty, never 0 (see
  :data:`UNMEASURED_COLUMNS`).
- ``Network+Server Send/Recv``: perf_analyzer computes it as average latency minus
  client send, client receive, server queue and server compute, floored at 0. With
  no client send/receive times here it is average latency minus the four server
  columns (floored at 0 likewise), so it also holds the client's own serialisation
  time. Empty where there are no server times (in process, peers).
- Rows follow the report's levels (ascending concurrency); perf_analyzer sorts them
  by ``Inferences/Second``. ``Inferences/Second`` is the scenario's ``per_s`` in its
  ``unit`` (requests, faces, frames, ...).

The plots need matplotlib (the ``bench`` extra, not in the production image);
without it :func:`write_plots` writes nothing and says why. Only numbers, units,
model and scenario names go into a plot.
"""

from __future__ import annotations

import csv
import logging
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

PERF_ANALYZER_COLUMNS: tuple[str, ...] = (
    "Concurrency",
    "Inferences/Second",
    "Client Send",
    "Network+Server Send/Recv",
    "Server Queue",
    "Server Compute Input",
    "Server Compute Infer",
    "Server Compute Output",
    "Client Recv",
    "p50 latency",
    "p90 latency",
    "p95 latency",
    "p99 latency",
    "Avg latency",
    "request/response",
    "response wait",
)

#: Columns ``kyc bench`` does not measure: always written as empty cells.
UNMEASURED_COLUMNS: tuple[str, ...] = (
    "Client Send", "Client Recv", "request/response", "response wait",
)

#: ``server_us`` keys, in the order of the CSV's server columns.
SERVER_STAGES: tuple[str, ...] = ("queue", "compute_input", "compute_infer", "compute_output")

_PERCENTILES = ("p50", "p90", "p95", "p99")
_STAGE_LABELS = ("queue", "compute input", "compute infer", "compute output")
_STAGE_COLOURS = ("#9e9e9e", "#4e79a7", "#f28e2b", "#59a14f")

THROUGHPUT_PNG = "throughput_latency.png"
STAGES_PNG = "stage_breakdown.png"


# -- helpers ---------------------------------------------------------------------------
def _number(value: Any) -> float | None:
    """A finite int or float as float; None for anything else (None, NaN, bool, text)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _levels(scenario: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The scenario's levels; none for a skipped scenario."""
    if "skipped" in scenario:
        return []
    levels = scenario.get("levels")
    return [level for level in levels or () if isinstance(level, Mapping)]


def _scenarios(report: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(name, scenario) for every scenario that has levels, in report order."""
    scenarios = report.get("scenarios") or {}
    return [(str(name), scenario) for name, scenario in scenarios.items()
            if isinstance(scenario, Mapping) and _levels(scenario)]


def _file_name(name: str) -> str:
    """A scenario name made safe as a file name (no separators, no leading dot)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name).lstrip(".") or "scenario"


# -- CSV -------------------------------------------------------------------------------
def _us(value: float | None) -> str:
    return "" if value is None else str(round(value))


def _rate(value: float | None) -> str:
    # perf_analyzer writes a double with the stream's default format (%g, 6 digits).
    return "" if value is None else f"{value:.6g}"


def csv_row(level: Mapping[str, Any]) -> dict[str, str]:
    """One level as the cells of :data:`PERF_ANALYZER_COLUMNS` (text; empty = unknown)."""
    latency = level.get("latency_ms") or {}
    latency_us = {key: None if (ms := _number(latency.get(key))) is None else ms * 1e3
                  for key in (*_PERCENTILES, "avg")}
    server = level.get("server_us")
    stages = ([_number(server.get(stage)) for stage in SERVER_STAGES]
              if isinstance(server, Mapping) else [None] * len(SERVER_STAGES))
    known = [value for value in stages if value is not None]
    network = None
    if latency_us["avg"] is not None and len(known) == len(SERVER_STAGES):
        network = max(0.0, latency_us["avg"] - sum(known))
    concurrency = _number(level.get("concurrency"))
    row = {column: "" for column in PERF_ANALYZER_COLUMNS}
    row.update({
        "Concurrency": "" if concurrency is None else str(int(concurrency)),
        "Inferences/Second": _rate(_number(level.get("per_s"))),
        "Network+Server Send/Recv": _us(network),
        "Server Queue": _us(stages[0]),
        "Server Compute Input": _us(stages[1]),
        "Server Compute Infer": _us(stages[2]),
        "Server Compute Output": _us(stages[3]),
        **{f"{key} latency": _us(latency_us[key]) for key in _PERCENTILES},
        "Avg latency": _us(latency_us["avg"]),
    })
    return row


def write_csvs(report: Mapping[str, Any], directory: Path) -> list[Path]:
    """Write ``<scenario>.csv`` in perf_analyzer's ``-f`` format for every scenario
    with levels, one row per level (levels with errors included); return the paths.

    Skipped scenarios and scenarios without levels get no file. See the module
    docstring for how the columns map and which stay empty.
    """
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, scenario in _scenarios(report):
        path = directory / f"{_file_name(name)}.csv"
        with path.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=PERF_ANALYZER_COLUMNS)
            writer.writeheader()
            writer.writerows(csv_row(level) for level in _levels(scenario))
        logger.debug("bench csv %s: %d rows", path, len(_levels(scenario)))
        paths.append(path)
    return paths


# -- plots -----------------------------------------------------------------------------
def write_plots(report: Mapping[str, Any], directory: Path) -> dict[str, Any]:
    """Write ``throughput_latency.png`` and ``stage_breakdown.png`` into ``directory``.

    Returns ``{"files": [paths written], "skipped": reason or None}``; the reason
    names what was not drawn and why (matplotlib missing, nothing to plot), so a
    report without plots still says why. Never raises for want of matplotlib.
    """
    try:
        import matplotlib
    except ImportError as exc:
        return {"files": [], "skipped": f"matplotlib is not installed ({exc}); "
                                        "install the 'bench' extra for plots"}
    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    files: list[Path] = []
    reasons: list[str] = []
    for file_name, draw in ((THROUGHPUT_PNG, _throughput_figure),
                            (STAGES_PNG, _stage_figure)):
        figure = draw(Figure, report)
        if isinstance(figure, str):
            reasons.append(f"{file_name}: {figure}")
            continue
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / file_name
        figure.savefig(path, dpi=110)
        logger.debug("bench plot %s", path)
        files.append(path)
    return {"files": files, "skipped": "; ".join(reasons) or None}


def _grid(count: int, columns: int = 2) -> tuple[int, int]:
    ncols = min(count, columns)
    return math.ceil(count / ncols), ncols


def _log_if_wide(values: Sequence[float], ratio: float = 20.0) -> bool:
    return bool(values) and min(values) > 0 and max(values) / min(values) >= ratio


def _throughput_points(scenario: Mapping[str, Any]) -> list[tuple[float, float, str]]:
    """(per_s, p95 ms, "cN") of the levels that have both figures."""
    points = []
    for level in _levels(scenario):
        rate = _number(level.get("per_s"))
        p95 = _number((level.get("latency_ms") or {}).get("p95"))
        concurrency = _number(level.get("concurrency"))
        if rate is not None and rate > 0 and p95 is not None:
            label = "" if concurrency is None else f"c{int(concurrency)}"
            points.append((rate, p95, label))
    return points


def _throughput_figure(figure_class: Any, report: Mapping[str, Any]) -> Any:
    """Throughput against p95 latency, one subplot per unit; a reason string if empty."""
    by_unit: dict[str, list[tuple[str, list[tuple[float, float, str]]]]] = {}
    for name, scenario in _scenarios(report):
        points = _throughput_points(scenario)
        if points:
            unit = str(scenario.get("unit") or "requests")
            by_unit.setdefault(unit, []).append((name, points))
    if not by_unit:
        return "no scenario has a level with both throughput and p95 latency"

    nrows, ncols = _grid(len(by_unit))
    figure = figure_class(figsize=(6.4 * ncols, 4.6 * nrows), layout="constrained")
    axes = figure.subplots(nrows, ncols, squeeze=False).ravel()
    for ax, (unit, lines) in zip(axes, by_unit.items(), strict=False):  # spare cells hidden below
        for name, points in lines:
            rates, p95s, _ = zip(*points, strict=True)
            ax.plot(rates, p95s, marker="o", label=name)
            for rate, p95, label in points:
                ax.annotate(label, (rate, p95), xytext=(4, 4), textcoords="offset points",
                            fontsize=8)
        every_rate = [rate for _, points in lines for rate, _, _ in points]
        every_p95 = [p95 for _, points in lines for _, p95, _ in points]
        if _log_if_wide(every_rate):
            ax.set_xscale("log")
        if _log_if_wide(every_p95):
            ax.set_yscale("log")
        ax.set_title(unit)
        ax.set_xlabel(f"throughput ({unit}/s)")
        ax.set_ylabel("p95 latency (ms)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    for ax in axes[len(by_unit):]:
        ax.set_visible(False)
    return figure


def _model_order(scenario: Mapping[str, Any], levels: Iterable[Mapping[str, Any]]) -> list[str]:
    """The scenario's ``models`` first (entry model first), then any other model seen."""
    order = [str(model) for model in scenario.get("models") or ()]
    seen = {model for level in levels for model in (level.get("model_stats") or {})}
    return [model for model in order if model in seen] + sorted(seen - set(order))


def _stage_bars(scenario: Mapping[str, Any]) -> list[tuple[str, list[float]]]:
    """("model @cN", [queue, input, infer, output] in ms per request of that model)
    grouped by model, then by level; models without any stage time are left out."""
    levels = _levels(scenario)
    bars = []
    for model in _model_order(scenario, levels):
        for level in levels:
            stats = (level.get("model_stats") or {}).get(model)
            if not isinstance(stats, Mapping):
                continue
            stages = [_number(stats.get(f"{stage}_us")) for stage in SERVER_STAGES]
            if all(value is None for value in stages):
                continue
            concurrency = _number(level.get("concurrency"))
            suffix = "" if concurrency is None else f" @c{int(concurrency)}"
            bars.append((f"{model}{suffix}", [(value or 0.0) / 1e3 for value in stages]))
    return bars


def _stage_figure(figure_class: Any, report: Mapping[str, Any]) -> Any:
    """Stacked queue/compute bars per model and level, one subplot per served scenario;
    a reason string if no served scenario has model statistics."""
    panels = [(name, bars) for name, scenario in _scenarios(report)
              if scenario.get("kind") == "served" and (bars := _stage_bars(scenario))]
    if not panels:
        return "no served scenario has model statistics"

    bar_inches = 0.3
    height = sum(len(bars) * bar_inches + 1.1 for _, bars in panels) + 0.6
    figure = figure_class(figsize=(10, max(3.5, height)), layout="constrained")
    axes = figure.subplots(len(panels), 1, squeeze=False,
                           gridspec_kw={"height_ratios": [len(bars) + 3 for _, bars in panels]})
    for ax, (name, bars) in zip(axes[:, 0], panels, strict=True):
        labels = [label for label, _ in bars]
        positions = range(len(bars))
        left = [0.0] * len(bars)
        for index, (stage, colour) in enumerate(zip(_STAGE_LABELS, _STAGE_COLOURS, strict=True)):
            widths = [values[index] for _, values in bars]
            ax.barh(positions, widths, left=left, color=colour, label=stage, height=0.7)
            left = [start + width for start, width in zip(left, widths, strict=True)]
        for position, total in zip(positions, left, strict=True):
            ax.annotate(f"{total:.1f}", (total, position), xytext=(3, 0),
                        textcoords="offset points", va="center", fontsize=7)
        ax.set_yticks(list(positions), labels, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlim(0, max(left) * 1.12 or 1.0)
        ax.set_title(name)
        ax.set_xlabel("ms per request of the model")
        ax.grid(True, axis="x", alpha=0.3)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="outside upper center", ncols=len(_STAGE_LABELS),
                  fontsize=8)
    return figure
