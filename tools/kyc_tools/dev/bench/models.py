"""The model files a bench run serves or runs in process: its private copy of the
repository, the pipeline's steps of an entry, and the in-process ONNX sessions."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kyc_tools.dev.bench.options import BenchError
from kyc_tools.repo.config import load_config
from kyc_tools.repo.publish import precompile_python_models


# -- the model repository copy -------------------------------------------------------
def _skipped(name: str) -> bool:
    """Staging folders, locks and bytecode caches stay out of the copy."""
    return name.startswith(".") or name == "__pycache__"


def copy_repository(src: Path, dest: Path, models: Iterable[str] | None = None) -> Path:
    """A cheap copy of a model repository: ``config.pbtxt`` files copied (editable),
    every other file hard-linked (copied across file systems); ``models`` limits the
    copy to those model folders. Python files are precompiled in the copy (see
    :func:`precompile_python_models`)."""
    wanted = None if models is None else set(models)
    dest.mkdir(parents=True)
    for model_dir in sorted(p for p in src.resolve().iterdir() if p.is_dir()):
        if not _skipped(model_dir.name) and (wanted is None or model_dir.name in wanted):
            _mirror(model_dir, dest / model_dir.name)
    precompile_python_models(dest)
    return dest


def _mirror(src_dir: Path, dest_dir: Path) -> None:
    for root, dirs, files in os.walk(src_dir):
        dirs[:] = [d for d in dirs if not _skipped(d)]
        target = dest_dir / Path(root).relative_to(src_dir)
        target.mkdir(parents=True, exist_ok=True)
        for name in files:
            if _skipped(name):
                continue
            if name == "config.pbtxt":
                shutil.copyfile(Path(root) / name, target / name)
            else:
                _link(Path(root) / name, target / name)


def _link(src: Path, dest: Path) -> None:
    """A hard link (a regular file, which the live copy and `kyc repo publish` take: they
    refuse symbolic links), or a copy across file systems."""
    try:
        os.link(src, dest)
    except OSError:
        shutil.copyfile(src, dest)


def max_batch_size(repository: Path, model: str) -> int:
    return int(load_config(repository / model / "config.pbtxt").max_batch_size)


def pipeline_steps(repository: Path, model: str) -> list[str]:
    """The models whose queue and compute times make up one request of ``model``:
    the model itself, or an ensemble's steps (nested ensembles expanded). Models a
    Python model calls through BLS are inside their caller's compute time."""
    config = load_config(repository / model / "config.pbtxt")
    if config.platform != "ensemble":
        return [model]
    steps: list[str] = []
    for step in config.ensemble_scheduling.step:
        steps += [m for m in pipeline_steps(repository, step.model_name) if m not in steps]
    return steps


def check_weights(repository: Path, models: Iterable[str]) -> None:
    """Every model but an ensemble has its files (an ensemble has none)."""
    missing = [m for m in sorted(models)
               if load_config(repository / m / "config.pbtxt").platform != "ensemble"
               and not list((repository / m).glob("[0-9]*/model.*"))]
    if missing:
        raise BenchError(f"no model files for {', '.join(missing)} in {repository}: "
                         "run `make setup`")


# -- the face path ---------------------------------------------------------------------
def face_photos(count: int = 0) -> list[bytes]:
    """The real test portraits, encoded (the manifest's photos, CREDITS left out); all
    of them whatever ``count``: requests cycle through them."""
    from kyc_tools.assets.fetch import fetch_test_photos

    photos = fetch_test_photos()
    return [photos[role].read_bytes() for role in sorted(photos) if role != "CREDITS"]


def onnx_session(repository: Path, model: str) -> Any:
    """``model``'s onnxruntime session as the served Python-based backend makes it."""
    from kyc.local import LocalRepository

    return LocalRepository(repository).step(model).runner.session


def onnx_threads(local: Any) -> dict[str, int]:
    """The intra-op threads of every ONNX model a LocalRepository has built."""
    from kyc.onnx_runtime.backend import OnnxStep

    return {name: step.runner.settings.intra_op_threads
            for name, step in sorted(local.built().items()) if isinstance(step, OnnxStep)}
