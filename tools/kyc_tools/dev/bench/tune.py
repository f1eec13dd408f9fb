"""``kyc tune``: NVIDIA's Model Analyzer searches a model's serving configuration.

Model Analyzer (``make model-analyzer``: 1.58.0 in a venv of its own) runs its manual
search over what the config of a model decides on a CPU host: instance counts, the
largest batch and the dynamic batcher's queue delay. For each candidate config it
starts *our* tritonserver (the PyPI wheel's, with the backend directory ``kyc serve``
assembles: local launch mode; its remote mode needs the repository API, which
``kyc serve`` locks behind an admin-key header Model Analyzer cannot send), loads the
variant and drives it with perf_analyzer 2.51 at each concurrency. Variable input
dimensions take the shape of the model's own warm-up sample (a 960x960 page, a
320-pixel text line): the cost of these convolutional models depends on the shape,
not on the pixels.

What this module adds to Model Analyzer: the search written from the shipped config
(its current values always among the candidates), the result read back from Model
Analyzer's CSV (the shipped config is measured twice: as it is, ``*_config_default``, and
as a point of the search, which shows the run-to-run spread), the choice (the highest
throughput within the latency budget, fewer instances and a shorter delay on a tie
within 3%), and, with ``apply``, the choice
written into the shipped config by :mod:`kyc_tools.repo.config_edit` (comments kept). The
reports and plots Model Analyzer writes are kept as they are.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kyc.pipeline.modelconfig import CONFIG, Repository, load_config

NAME = "model-analyzer"
# A candidate whose throughput is within this fraction of the best one counts as
# equal: the simpler one (fewer instances, shorter delay) wins.
TIE = 0.03


class TuneError(RuntimeError):
    """Model Analyzer is missing, refused the model or failed; the message says which."""


def executable() -> str:
    """This environment's Model Analyzer (``make model-analyzer``), else the PATH's."""
    beside = Path(sys.prefix) / "bin" / NAME
    found = str(beside) if beside.is_file() else shutil.which(NAME)
    if not found:
        raise TuneError(f"{NAME} is not installed: run `make model-analyzer`")
    return found


@dataclass(frozen=True)
class Search:
    """The candidates: every combination of these, for each model."""

    instances: tuple[int, ...] = (1, 2)
    max_batch_sizes: tuple[int, ...] = ()  # () = the shipped value only
    delays_us: tuple[int, ...] = (0, 2000, 10000)
    concurrency: tuple[int, ...] = (1, 4, 8)
    latency_budget_ms: float | None = None  # on perf_analyzer's p99
    # perf_analyzer's windows, as kyc bench counts them: 3 windows of this many answers
    # each, reported together. Its default (time windows until 3 agree within 10%, up
    # to 10 trials) took over 2 minutes per level for ocr_det on this shared 2-core VM.
    requests_per_window: int = 16


@dataclass(frozen=True)
class Candidate:
    """One config Model Analyzer measured, with its figures per concurrency."""

    config: str  # Model Analyzer's name of the variant (``ocr_det_config_3``)
    instances: int
    max_batch_size: int
    delay_us: int | None  # None: no dynamic batching
    levels: tuple[tuple[int, float, float], ...]  # (concurrency, infer/s, p99 ms)

    def best_within(self, budget_ms: float | None) -> tuple[int, float, float] | None:
        fit = [lv for lv in self.levels if budget_ms is None or lv[2] <= budget_ms]
        return max(fit, key=lambda lv: lv[1]) if fit else None


@dataclass
class ModelResult:
    model: str
    shipped: dict
    candidates: list[Candidate] = field(default_factory=list)
    chosen: Candidate | None = None

    def to_json(self) -> dict:
        return {"model": self.model, "shipped": self.shipped,
                "chosen": asdict(self.chosen) if self.chosen else None,
                "candidates": [asdict(c) for c in self.candidates]}


def tunable(repository: Path, model: str) -> None:
    """Refuse what Model Analyzer's manual search cannot vary alone: ensembles and the
    Python models that call others (tune their callees), and models without batching."""
    config = Repository(repository).config(model)
    if config.platform == "ensemble" or config.backend == "python":
        raise TuneError(f"{model}: {config.platform or config.backend} models are not tuned "
                        "alone (ensembles and BLS steps call other models): tune the ONNX "
                        "models they call")
    if config.max_batch_size < 1:
        raise TuneError(f"{model}: max_batch_size 0, nothing to batch")


def shipped_values(repository: Path, model: str) -> dict:
    config = Repository(repository).config(model)
    return {"instances": sum(g.count or 1 for g in config.instance_group) or 1,
            "max_batch_size": int(config.max_batch_size),
            "delay_us": (int(config.dynamic_batching.max_queue_delay_microseconds)
                         if config.HasField("dynamic_batching") else None)}


def warmup_shapes(repository: Path, model: str) -> list[str]:
    """perf_analyzer's ``--shape`` for inputs with variable dimensions, from the model's
    first warm-up sample (which names the shape it is served with)."""
    config = Repository(repository).config(model)
    variable = [i for i in config.input if any(d < 0 for d in i.dims)]
    if not variable:
        return []
    samples = config.model_warmup[0].inputs if config.model_warmup else {}
    shapes = []
    for entry in variable:
        if entry.name not in samples:
            raise TuneError(f"{model}: input {entry.name} has variable dimensions and no "
                            "warm-up sample gives it a shape")
        shapes.append(f"{entry.name}:{','.join(str(d) for d in samples[entry.name].dims)}")
    return shapes


def analyzer_config(repository: Path, models: Sequence[str], search: Search, work: Path,
                    server: dict, ports: tuple[int, int, int]) -> dict:
    """Model Analyzer's YAML (as a dict) for a manual search of ``models``."""
    http, grpc, metrics = ports
    profile = {}
    for model in models:
        shipped = shipped_values(repository, model)
        delays = sorted({*search.delays_us, *([shipped["delay_us"]]
                                              if shipped["delay_us"] is not None else [])})
        batches = sorted({*search.max_batch_sizes, shipped["max_batch_size"]})
        instances = sorted({*search.instances, shipped["instances"]})
        entry: dict = {
            "cpu_only": True,
            "model_config_parameters": {
                "max_batch_size": batches,
                "instance_group": [[{"count": n, "kind": "KIND_CPU"}] for n in instances],
                "dynamic_batching": {"max_queue_delay_microseconds": delays},
            },
            "parameters": {"concurrency": list(search.concurrency)},
        }
        flags: dict = {"measurement-mode": "count_windows",
                       "measurement-request-count": search.requests_per_window,
                       "max-trials": 3, "stability-percentage": 1000}
        shapes = warmup_shapes(repository, model)
        if shapes:
            flags["shape"] = shapes
        entry["perf_analyzer_flags"] = flags
        profile[model] = entry
    config = {
        "model_repository": str(repository),
        "output_model_repository_path": str(work / "variants"),
        "override_output_model_repository": True,
        "export_path": str(work / "export"),
        "checkpoint_directory": str(work / "checkpoints"),
        "triton_launch_mode": "local",
        "triton_server_path": server["path"],
        "triton_server_flags": server["flags"],
        "triton_server_environment": server["environment"],
        "triton_http_endpoint": f"127.0.0.1:{http}",
        "triton_grpc_endpoint": f"127.0.0.1:{grpc}",
        "triton_metrics_url": f"http://127.0.0.1:{metrics}/metrics",
        "perf_analyzer_path": server["perf_analyzer"],
        "run_config_search_disable": True,
        "profile_models": profile,
    }
    if search.latency_budget_ms is not None:
        config["latency_budget"] = int(search.latency_budget_ms)
    return config


def read_candidates(export: Path, variants: Path, model: str) -> list[Candidate]:
    """Model Analyzer's measurements of ``model`` (its inference CSV) with the values of
    each variant read from the config it wrote."""
    rows: dict[str, list[tuple[int, float, float]]] = {}
    with (export / "results" / "metrics-model-inference.csv").open(newline="") as f:
        for row in csv.DictReader(f):
            if row["Model"] != model:
                continue
            rows.setdefault(row["Model Config Path"], []).append(
                (int(row["Concurrency"]), float(row["Throughput (infer/sec)"]),
                 float(row["p99 Latency (ms)"])))
    candidates = []
    for name, levels in rows.items():
        folder = variants / name
        if not (folder / CONFIG).is_file():
            continue
        config = load_config(folder / CONFIG)
        candidates.append(Candidate(
            config=name,
            instances=sum(g.count or 1 for g in config.instance_group) or 1,
            max_batch_size=int(config.max_batch_size),
            delay_us=(int(config.dynamic_batching.max_queue_delay_microseconds)
                      if config.HasField("dynamic_batching") else None),
            levels=tuple(sorted(levels))))
    return sorted(candidates, key=lambda c: (c.instances, c.max_batch_size, c.delay_us or 0,
                                             c.config))


def choose(candidates: Sequence[Candidate], budget_ms: float | None) -> Candidate | None:
    """The highest throughput within the budget; within :data:`TIE` of it, the
    simplest (fewer instances, shorter delay, smaller batch)."""
    scored = [(c, c.best_within(budget_ms)) for c in candidates]
    scored = [(c, best[1]) for c, best in scored if best is not None]
    if not scored:
        return None
    top = max(rate for _, rate in scored)
    near = [c for c, rate in scored if rate >= (1 - TIE) * top]
    return min(near, key=lambda c: (c.instances, c.delay_us or 0, c.max_batch_size))


def apply(repository: Path, model: str, chosen: Candidate) -> bool:
    """Write the chosen values into the shipped config; True when it changed."""
    from kyc_tools.repo.config_edit import edit_config

    path = repository / model / CONFIG
    text = path.read_text(encoding="utf-8")

    def change(config) -> None:
        config.max_batch_size = chosen.max_batch_size
        del config.instance_group[1:]
        group = config.instance_group[0] if config.instance_group else config.instance_group.add()
        group.count = chosen.instances
        if chosen.delay_us is not None:
            config.dynamic_batching.max_queue_delay_microseconds = chosen.delay_us

    edited = edit_config(text, change)
    if edited == text:
        return False
    path.write_text(edited, encoding="utf-8")
    return True


def server_settings(backend_dir: Path) -> dict:
    """How Model Analyzer starts our tritonserver: the binary, the flags ``kyc serve``
    gives it, and the environment its Python stubs need."""
    from kyc_tools.dev.bench.perf_analyzer import executable as perf_analyzer
    from kyc_tools.operator.triton import MALLOC_SETTINGS, THREAD_SETTINGS, assemble_backends

    install = assemble_backends(backend_dir)
    flags = {"backend-directory": str(install.backend_dir),
             "backend-config": "python,shm-region-prefix-name=kyc_tune_"}
    if install.cache_dir is not None:
        flags["cache-directory"] = str(install.cache_dir)
    if install.library_dirs:
        flags["pinned-memory-pool-byte-size"] = 0
    env = install.environment(dict(os.environ))
    keep = ("PATH", "LD_LIBRARY_PATH", "PYTHONDONTWRITEBYTECODE", *MALLOC_SETTINGS,
            *THREAD_SETTINGS, "HOME")
    return {"path": str(install.server), "flags": flags,
            "environment": {k: env[k] for k in keep if k in env},
            "perf_analyzer": perf_analyzer()}


def run(repository: Path, models: Sequence[str], search: Search, out: Path, *,
        apply_choice: bool = False, timeout_s: float = 3600.0,
        keep_work: Path | None = None) -> list[ModelResult]:
    """Profile ``models`` with Model Analyzer; reports under ``out``; returns the results."""
    from kyc_tools.operator.server import free_ports

    repository = repository.resolve()
    for model in models:
        tunable(repository, model)
    analyzer = executable()
    work = keep_work or Path(tempfile.mkdtemp(prefix="kyc-tune-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        config = analyzer_config(repository, models, search, work,
                                 server_settings(work / "backends"),
                                 tuple(free_ports(3)))
        config_file = work / "model-analyzer.yaml"
        config_file.write_text(_yaml(config))
        log_file = work / "model-analyzer.log"
        with log_file.open("w") as log:
            try:
                done = subprocess.run([analyzer, "profile", "-f", str(config_file)],
                                      stdout=log, stderr=subprocess.STDOUT,
                                      timeout=timeout_s, check=False)
            except subprocess.TimeoutExpired:
                raise TuneError(f"{NAME}: no result in {timeout_s:.0f} s "
                                f"(its log: {log_file})") from None
        if done.returncode != 0:
            tail = log_file.read_text(errors="replace").strip().splitlines()[-8:]
            raise TuneError(f"{NAME} exited {done.returncode}: " + " | ".join(tail))
        results = []
        for model in models:
            result = ModelResult(model, shipped_values(repository, model),
                                 read_candidates(work / "export", work / "variants", model))
            if not result.candidates:
                raise TuneError(f"{NAME} measured nothing for {model} (its log: {log_file})")
            result.chosen = choose(result.candidates, search.latency_budget_ms)
            results.append(result)
        _keep_reports(work, out, models, config, log_file)
        write_summary(out, results, search)
        if apply_choice:
            for result in results:
                if result.chosen is not None:
                    apply(repository, result.model, result.chosen)
        return results
    finally:
        if keep_work is None:
            shutil.rmtree(work, ignore_errors=True)


def _keep_reports(work: Path, out: Path, models: Sequence[str], config: dict,
                  log_file: Path) -> None:
    """Model Analyzer's own outputs, as it wrote them: the CSVs, the summary reports
    and the plots of each model; and the YAML it was given (paths of this run)."""
    out.mkdir(parents=True, exist_ok=True)
    export = work / "export"
    shutil.copytree(export / "results", out / "results", dirs_exist_ok=True)
    for model in models:
        for source, target in ((export / "reports" / "summaries" / model, out / model),
                               (export / "plots" / "simple" / model, out / model / "plots")):
            if source.is_dir():
                shutil.copytree(source, target, dirs_exist_ok=True)
    (out / "model-analyzer.yaml").write_text(_yaml(config))


def _yaml(config: dict) -> str:
    """Model Analyzer's config file: JSON, which is YAML (no YAML writer needed)."""
    return json.dumps(config, indent=1) + "\n"


def write_summary(out: Path, results: Sequence[ModelResult], search: Search) -> None:
    """``tune.json`` (every candidate's figures) and ``README.md`` (a table per model)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "tune.json").write_text(json.dumps(
        {"search": asdict(search), "models": [r.to_json() for r in results]}, indent=1) + "\n")
    lines = ["# Model Analyzer: the serving configs searched", "",
             "Written by `kyc tune` (kyc_tools.dev.bench.tune): Model Analyzer 1.58's manual "
             "search, perf_analyzer 2.51, our tritonserver; throughput in inferences/s, p99 in ms. "
             "Chosen: the highest throughput"
             + (f" with p99 <= {search.latency_budget_ms:g} ms" if search.latency_budget_ms
                else "") + f"; within {TIE:.0%} of it, the simplest config.", ""]
    for result in results:
        lines += [f"## {result.model}", "",
                  f"Shipped: {result.shipped['instances']} instance(s), max batch "
                  f"{result.shipped['max_batch_size']}, queue delay "
                  f"{result.shipped['delay_us']} us.", "",
                  "| config | instances | max batch | delay us | "
                  + " | ".join(f"c{c} infer/s (p99 ms)" for c in search.concurrency) + " |",
                  "|---|---|---|---|" + "---|" * len(search.concurrency)]
        for c in result.candidates:
            by_level = {lv[0]: lv for lv in c.levels}
            cells = [f"{by_level[n][1]:.1f} ({by_level[n][2]:.0f})" if n in by_level else "-"
                     for n in search.concurrency]
            mark = ((" (shipped, as is)" if c.config.endswith("_config_default") else "")
                    + (" **chosen**" if c is result.chosen else ""))
            lines.append(f"| {c.config}{mark} | {c.instances} | {c.max_batch_size} | "
                         f"{c.delay_us} | " + " | ".join(cells) + " |")
        lines.append("")
    (out / "README.md").write_text("\n".join(lines))
