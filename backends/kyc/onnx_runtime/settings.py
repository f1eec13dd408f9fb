"""What an ONNX model's config says to the local ``onnxruntime`` backend: its tensors,
threads, memory options, batch slicing and CPU runtime (defaults live here only)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kyc.dtypes import numpy_dtype

# The CPU runtimes: onnxruntime's own provider, or the configs' "openvino" accelerator
# (the `openvino` package here; onnxruntime's OpenVINO provider in the NGC image).
ONNXRUNTIME, OPENVINO = "onnxruntime", "openvino"
# Set to "onnxruntime" (kyc serve --cpu-runtime), the stubs ignore the configs' CPU
# accelerators: the same configs measured on either runtime (kyc bench --compare).
CPU_RUNTIME_ENV = "KYC_CPU_RUNTIME"


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: np.dtype
    dims: tuple[int, ...]


@dataclass(frozen=True)
class OnnxModelSettings:
    """Settings read once from the model config (defaults live here only)."""

    model_file: Path
    max_batch_size: int
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    intra_op_threads: int
    inter_op_threads: int
    # The real onnxruntime backend's memory parameters, same names and values:
    # ``enable_mem_arena`` / ``enable_mem_pattern`` ("0"/"1") and
    # ``memory.enable_memory_arena_shrinkage`` (e.g. "cpu:0": the arena returns
    # what a run grew after the run; a run-options entry in onnxruntime).
    enable_mem_arena: bool = True
    enable_mem_pattern: bool = True
    arena_shrinkage: str = ""
    # Local backend only (the real backend shrinks after every run): with
    # ``arena_shrinkage``, only runs of more than this many batch items shrink the
    # arena after them. A shrunk arena is grown again by the next run, page by page:
    # measured here, +35-40 ms and 28,000 page faults per ocr_det page, +30% per
    # face_detector call. Runs up to this size then allocate nothing after the first,
    # and the arena holds at most what one of them needs. 0: every run shrinks it.
    arena_shrink_above_batch: int = 0
    # Local backend only: a batch of more than this many items runs in slices of at
    # most this many, so that the arena never grows past the mark one slice needs
    # (the warm-up's) and no run need shrink it: its size no longer depends on which
    # batches came by last. 0: every batch in one run.
    max_run_batch: int = 0
    # Local backend only (the real backend ignores the key): the stub's CPU niceness,
    # 0-19. A step that may wait (OCR) yields the cores to a step that must not
    # (liveness frames) when both run, and still gets every core when alone.
    cpu_nice: int = 0
    # The config's CPU execution accelerator, as the real backend reads it
    # (optimization.execution_accelerators.cpu_execution_accelerator, its first name:
    # "openvino") and its parameters; "": onnxruntime's own CPU provider. Set
    # KYC_CPU_RUNTIME=onnxruntime to run every model on onnxruntime alone.
    cpu_accelerator: str = ""
    accelerator_parameters: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_config(
        cls, config: Mapping, model_dir: Path, version: str, instance_count: int = 1,
        env: Mapping[str, str] = os.environ,
    ) -> OnnxModelSettings:
        params = {k: v.get("string_value", "") for k, v in config.get("parameters", {}).items()}
        filename = config.get("default_model_filename") or "model.onnx"
        # Like the real backend: threads from `parameters`; else share the cores
        # among the instances so that several stubs do not oversubscribe them.
        default_threads = max(1, (os.cpu_count() or 1) // max(1, instance_count))
        return cls(
            model_file=model_dir / version / filename,
            max_batch_size=int(config.get("max_batch_size", 0)),
            inputs=tuple(_spec(t) for t in config.get("input", [])),
            outputs=tuple(_spec(t) for t in config.get("output", [])),
            intra_op_threads=int(params.get("intra_op_thread_count") or default_threads),
            inter_op_threads=int(params.get("inter_op_thread_count") or 1),
            enable_mem_arena=_flag(params.get("enable_mem_arena"), True),
            enable_mem_pattern=_flag(params.get("enable_mem_pattern"), True),
            arena_shrinkage=params.get("memory.enable_memory_arena_shrinkage", ""),
            arena_shrink_above_batch=_count(params.get("arena_shrink_above_batch"),
                                            "arena_shrink_above_batch"),
            max_run_batch=_count(params.get("max_run_batch"), "max_run_batch"),
            cpu_nice=_nice(params.get("cpu_nice")),
            **_cpu_accelerator(config, env),
        )


def _cpu_accelerator(config: Mapping, env: Mapping[str, str]) -> dict:
    """The first CPU execution accelerator of ``config`` (name and parameters), unless
    ``KYC_CPU_RUNTIME`` says onnxruntime."""
    runtime = env.get(CPU_RUNTIME_ENV, "").strip()
    if runtime not in ("", ONNXRUNTIME):
        raise ValueError(f"{CPU_RUNTIME_ENV} is {runtime!r}: '{ONNXRUNTIME}' or unset (the "
                         "configs' own accelerators)")
    accelerators = (config.get("optimization", {}).get("execution_accelerators", {})
                    .get("cpu_execution_accelerator", []))
    if runtime == ONNXRUNTIME or not accelerators:
        return {}
    first = accelerators[0]
    if first.get("name") != OPENVINO:
        raise ValueError(f"unknown CPU execution accelerator {first.get('name')!r}: the local "
                         f"backend knows '{OPENVINO}'")
    return {"cpu_accelerator": OPENVINO,
            "accelerator_parameters": tuple(sorted(first.get("parameters", {}).items()))}


def _nice(value: str | None) -> int:
    nice = int(value or 0)
    if not 0 <= nice <= 19:
        raise ValueError(f"cpu_nice must be 0-19, got {nice}")
    return nice


def _count(value: str | None, name: str) -> int:
    count = int(value or 0)
    if count < 0:
        raise ValueError(f"{name} must be 0 or more, got {count}")
    return count


def _flag(value: str | None, default: bool) -> bool:
    if value is None or value == "":
        return default
    if value.strip().lower() in ("1", "true"):
        return True
    if value.strip().lower() in ("0", "false"):
        return False
    raise ValueError(f"expected 0/1 or true/false, got {value!r}")


def _spec(tensor: Mapping) -> TensorSpec:
    return TensorSpec(
        name=tensor["name"],
        dtype=numpy_dtype(tensor["data_type"]),
        dims=tuple(int(d) for d in tensor.get("dims", [])),
    )


