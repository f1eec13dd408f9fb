"""``kyc repo check``: is a model repository sound before Triton sees it?

Each finding is one :class:`Problem`, printed as one line
``<path>: <what is wrong>``. The checks are the ones that cost outages when
skipped: a config Triton cannot parse, an ONNX file whose tensors disagree with
its config, a version folder without its model file (in poll mode that wedges
the server), an ensemble wired to a model or tensor that does not exist, a
TensorRT profile that does not cover ``max_batch_size``.

A model file is compared with its config only in the versions the config's
``version_policy`` serves (default: the latest): Triton never loads the others, and
after a change of a model's outputs (a 512-d embedding replacing a 128-d one) the
older versions stay on disk, for a rollback, without fitting the new config. Every
version folder must still hold its model file.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from kyc.pipeline.modelconfig import served_versions, version_dirs
from kyc_tools.repo.config import ConfigError, ModelConfig, load_config, model_kind, type_name

CONFIG = "config.pbtxt"
# Sub-folders of a model folder that are not versions and that Triton accepts.
NON_VERSION_DIRS = {"configs"}
TRT_PROFILE_KEYS = ("trt_profile_min_shapes", "trt_profile_opt_shapes", "trt_profile_max_shapes")


@dataclass(frozen=True)
class Problem:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


@dataclass
class CheckedModel:
    name: str
    config: ModelConfig | None
    versions: list[str]


def is_version_name(name: str) -> bool:
    return name.isdigit()


def _rel(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root.parent))
    except ValueError:
        return str(path)


def check_repository(repository: Path) -> list[Problem]:
    """All problems of a repository (an empty list when it is sound)."""
    repository = repository.resolve()
    if not repository.is_dir():
        return [Problem(str(repository), "is not a directory")]
    problems: list[Problem] = []
    models: dict[str, CheckedModel] = {}
    for entry in sorted(repository.iterdir()):
        if not entry.is_dir():
            continue
        if entry.name.startswith("."):
            problems.append(
                Problem(
                    _rel(entry, repository),
                    "hidden folder in the repository root: Triton loads it as a model "
                    "(stage new versions inside the model folder, never here)",
                )
            )
            continue
        checked, found = check_model(entry, root=repository)
        models[entry.name] = checked
        problems.extend(found)
    for model in models.values():
        if model.config is not None and model.config.platform == "ensemble":
            model_dir = repository / model.name
            problems.extend(check_ensemble(model_dir, model.config, models, repository))
    problems.extend(check_model_references(models, repository))
    return problems


def check_model_references(models: dict[str, CheckedModel], root: Path) -> list[Problem]:
    """A Python model's ``*_model`` parameters (a model it calls or reads the settings
    of: ``detector_model``, ``limits_model``...) name models of the repository; empty
    means not configured. Without this, the model fails in ``initialize``."""
    problems = []
    for model in models.values():
        if model.config is None or model_kind(model.config).name != "python":
            continue
        for key, value in sorted(model.config.parameters.items()):
            named = value.string_value
            if key.endswith("_model") and named and named not in models:
                problems.append(Problem(f"{model.name}/{CONFIG}",
                                        f"parameter {key} names model '{named}', which is not "
                                        f"in {root.name}"))
    return problems


def check_model(
    model_dir: Path,
    *,
    root: Path | None = None,
    versions: Iterable[Path] | None = None,
) -> tuple[CheckedModel, list[Problem]]:
    """Check one model folder; ``versions`` limits the version folders checked.

    ``versions`` may name folders that are not (yet) numeric, such as a staged
    version that ``kyc repo publish`` is about to rename into place; each of them is
    compared with the config. Without ``versions``, every numeric version is checked
    and those the version policy serves are compared with the config.
    """
    root = root or model_dir.parent
    problems: list[Problem] = []
    config_path = model_dir / CONFIG
    checked = CheckedModel(model_dir.name, None, [])
    if not config_path.is_file():
        problems.append(Problem(_rel(model_dir, root), f"no {CONFIG}"))
        return checked, problems
    try:
        config = load_config(config_path)
    except ConfigError as exc:
        problems.append(Problem(_rel(config_path, root), f"not a valid model config: {exc}"))
        return checked, problems
    checked.config = config
    problems.extend(_check_config(config, model_dir, config_path, root))

    if versions is None:
        for sub in sorted(model_dir.iterdir()):
            if (
                sub.is_dir()
                and not is_version_name(sub.name)
                and not sub.name.startswith(".")
                and sub.name not in NON_VERSION_DIRS
            ):
                problems.append(
                    Problem(
                        _rel(sub, root),
                        f"version folder '{sub.name}' is not a number (Triton ignores it)",
                    )
                )
        versions = version_dirs(model_dir)
        if not versions:
            problems.append(Problem(_rel(model_dir, root), "no numeric version folder"))
        problems.extend(_check_version_policy(config, versions, config_path, root))
        served = set(served_versions(config, versions))
    else:
        versions = list(versions)
        served = set(versions)
    for version in versions:
        checked.versions.append(version.name)
        problems.extend(check_version(config, version, root, against_config=version in served))
    return checked, problems


def _check_config(
    config: ModelConfig, model_dir: Path, config_path: Path, root: Path
) -> list[Problem]:
    problems = []
    where = _rel(config_path, root)
    if config.name and config.name != model_dir.name:
        problems.append(
            Problem(where, f"name '{config.name}' differs from its folder '{model_dir.name}'")
        )
    if not config.platform and not config.backend:
        problems.append(Problem(where, "neither platform nor backend is set"))
    if config.max_batch_size < 0:
        problems.append(Problem(where, "max_batch_size is negative"))
    for subdir in (model_dir / "configs",):
        if subdir.is_dir():
            for alt in sorted(subdir.glob("*.pbtxt")):
                try:
                    load_config(alt)
                except ConfigError as exc:
                    problems.append(Problem(_rel(alt, root), f"not a valid model config: {exc}"))
    problems.extend(_check_trt_profiles(config, where))
    if "challenge" in config.parameters and config.parameters["challenge"].string_value.strip():
        # kyc.liveness.session.LivenessSettings.challenge: `kyc eval liveness` sets it in
        # its private server only; served, every session would get the same challenge.
        problems.append(Problem(where, "parameter 'challenge' fixes every liveness "
                                       "challenge (a replayed clip would pass): leave it "
                                       "empty; it is for `kyc eval liveness` only"))
    return problems


def _check_version_policy(
    config: ModelConfig, versions: list[Path], config_path: Path, root: Path
) -> list[Problem]:
    if config.version_policy.WhichOneof("policy_choice") != "specific":
        return []
    present = {int(v.name) for v in versions}
    missing = [v for v in config.version_policy.specific.versions if v not in present]
    if not missing:
        return []
    return [
        Problem(
            _rel(config_path, root),
            f"version_policy names versions without a folder: {', '.join(map(str, missing))}",
        )
    ]


def check_version(
    config: ModelConfig, version_dir: Path, root: Path, *, against_config: bool = True
) -> list[Problem]:
    """The version folder holds what its backend needs, and (``against_config``) its
    model file agrees with the config."""
    kind = model_kind(config)
    if kind.model_file is None:
        return []
    model_file = version_dir / kind.model_file
    where = _rel(model_file, root)
    if not model_file.exists():
        hint = " (a poll-mode server wedges on such a folder)" if kind.name == "python" else ""
        return [Problem(where, f"missing: version folder has no {kind.model_file}{hint}")]
    if kind.name == "python":
        return _check_python_file(model_file, where)
    if kind.name == "onnx" and against_config:
        return check_onnx_against_config(config, model_file, where)
    return []


def _check_python_file(path: Path, where: str) -> list[Problem]:
    try:
        compile(path.read_bytes(), str(path), "exec")
    except SyntaxError as exc:
        return [Problem(where, f"Python syntax error at line {exc.lineno}: {exc.msg}")]
    except ValueError as exc:
        return [Problem(where, f"not Python source: {exc}")]
    return []


# -- ONNX ---------------------------------------------------------------------
def onnx_dims(value_info) -> list[int | None] | None:
    """Dims of an ONNX value (None for a dynamic dim); None when the rank is unknown."""
    tensor_type = value_info.type.tensor_type
    if not tensor_type.HasField("shape"):
        return None
    dims: list[int | None] = []
    for dim in tensor_type.shape.dim:
        dims.append(dim.dim_value if dim.HasField("dim_value") and dim.dim_value > 0 else None)
    return dims


def check_onnx_against_config(config: ModelConfig, model_file: Path, where: str) -> list[Problem]:
    """ONNX inputs/outputs, their types and shapes agree with the config."""
    import onnx

    try:
        model = onnx.load(str(model_file), load_external_data=False)
        onnx.checker.check_model(model)
    except Exception as exc:
        return [Problem(where, f"not a valid ONNX model: {str(exc).splitlines()[0][:200]}")]
    graph = model.graph
    initializers = {i.name for i in graph.initializer}
    graph_inputs = {v.name: v for v in graph.input if v.name not in initializers}
    graph_outputs = {v.name: v for v in graph.output}
    problems = _check_tensors(config, config.input, graph_inputs, "input", where)
    configured = {t.name for t in config.input}
    for name in sorted(set(graph_inputs) - configured):
        problems.append(Problem(where, f"model input '{name}' is missing from the config"))
    problems.extend(_check_tensors(config, config.output, graph_outputs, "output", where))
    return problems


def _check_tensors(
    config: ModelConfig, tensors: Iterable, values: dict, kind: str, where: str
) -> list[Problem]:
    """Each configured tensor (``kind``: input or output) is one of the model's
    ``values``, of the same type and shape."""
    problems = []
    for tensor in tensors:
        value_info = values.get(tensor.name)
        if value_info is None:
            problems.append(
                Problem(
                    where,
                    f"{kind} '{tensor.name}' is not an {kind} of the model "
                    f"(model {kind}s: {', '.join(sorted(values)) or 'none'})",
                )
            )
        else:
            problems.extend(_compare_type(tensor, value_info, kind, where))
            problems.extend(_compare_shape(config, tensor, value_info, kind, where))
    return problems


def _compare_type(tensor, value_info, kind: str, where: str) -> list[Problem]:
    from kyc.dtypes import ONNX_TO_TRITON

    want = type_name(tensor.data_type)
    have = ONNX_TO_TRITON.get(value_info.type.tensor_type.elem_type, "an unsupported type")
    if want == have:
        return []
    return [
        Problem(where, f"{kind} '{tensor.name}' is {want} in the config but {have} in the model")
    ]


def _compare_shape(config: ModelConfig, tensor, value_info, kind: str, where: str) -> list[Problem]:
    """The model's dims agree with the config's (a dynamic model dim fits any), past a
    dynamic batch dim when the config batches."""
    name = tensor.name
    dims = onnx_dims(value_info)
    if dims is None or tensor.HasField("reshape"):
        return []
    problems = []
    if config.max_batch_size > 0:
        if not dims:
            return [Problem(where, f"{kind} '{name}' has no batch dimension")]
        if dims[0] is not None:
            problems.append(
                Problem(
                    where,
                    f"{kind} '{name}' has a fixed first dimension {dims[0]} but "
                    f"max_batch_size is {config.max_batch_size}: the batch "
                    "dimension must be dynamic",
                )
            )
        dims = dims[1:]
    config_dims = list(tensor.dims)
    if len(dims) != len(config_dims):
        problems.append(
            Problem(
                where,
                f"{kind} '{name}' has {len(dims)} dims past the batch in the model "
                f"but {len(config_dims)} in the config {config_dims}",
            )
        )
        return problems
    for axis, (model_dim, config_dim) in enumerate(zip(dims, config_dims, strict=True)):
        if model_dim is not None and config_dim != model_dim:
            problems.append(
                Problem(
                    where,
                    f"{kind} '{name}' dim {axis} is {config_dim} in the config "
                    f"but {model_dim} in the model",
                )
            )
    return problems


# -- TensorRT profiles ----------------------------------------------------------
_PROFILE_RE = re.compile(r"^([^:,]+):(\d+(?:x\d+)*)$")


def _parse_profile(value: str) -> dict[str, list[int]] | None:
    shapes = {}
    for item in value.split(","):
        match = _PROFILE_RE.match(item.strip())
        if not match:
            return None
        shapes[match.group(1)] = [int(d) for d in match.group(2).split("x")]
    return shapes


def _check_trt_profiles(config: ModelConfig, where: str) -> list[Problem]:
    """Every TensorRT profile names real inputs, has their rank and covers max_batch_size."""
    problems = []
    inputs = {t.name: list(t.dims) for t in config.input}
    for accel in config.optimization.execution_accelerators.gpu_execution_accelerator:
        if accel.name != "tensorrt":
            continue
        profiles = {}
        for key in TRT_PROFILE_KEYS:
            if key not in accel.parameters:
                continue
            parsed = _parse_profile(accel.parameters[key])
            if parsed is None:
                problems.append(Problem(where, f"{key} is not 'NAME:AxBxC[,...]'"))
                continue
            profiles[key] = parsed
        if not profiles:
            continue
        if len(profiles) != len(TRT_PROFILE_KEYS):
            problems.append(Problem(where, "TensorRT profile needs min, opt and max shapes"))
            continue
        for key, shapes in profiles.items():
            problems.extend(_check_profile_shapes(config, inputs, key, shapes, where))
        problems.extend(_check_profile_bounds(config, inputs, profiles, where))
    return problems


def _check_profile_shapes(
    config: ModelConfig, inputs: dict[str, list[int]], key: str, shapes: dict[str, list[int]],
    where: str,
) -> list[Problem]:
    """The shapes of one profile (``key``) name ``inputs`` of the config (name -> dims),
    with their rank and the dims the config fixes."""
    problems = []
    batched = config.max_batch_size > 0
    for name, shape in shapes.items():
        if name not in inputs:
            problems.append(Problem(where, f"{key} names unknown input '{name}'"))
            continue
        dims = inputs[name]
        expected_rank = len(dims) + (1 if batched else 0)
        if len(shape) != expected_rank:
            problems.append(
                Problem(where, f"{key} for '{name}' has rank {len(shape)}, expected "
                        f"{expected_rank}")
            )
            continue
        fixed = shape[1:] if batched else shape
        for axis, (dim, want) in enumerate(zip(fixed, dims, strict=True)):
            if want != -1 and dim != want:
                problems.append(
                    Problem(where, f"{key} for '{name}' dim {axis} is {dim}, the "
                            f"config fixes it to {want}")
                )
    return problems


def _check_profile_bounds(
    config: ModelConfig, inputs: dict[str, list[int]], profiles: dict[str, dict[str, list[int]]],
    where: str,
) -> list[Problem]:
    """Every one of ``inputs`` has a max shape that covers max_batch_size, and
    min <= opt <= max."""
    problems = []
    maxes = profiles["trt_profile_max_shapes"]
    mins = profiles["trt_profile_min_shapes"]
    opts = profiles["trt_profile_opt_shapes"]
    for name in inputs:
        if name not in maxes:
            problems.append(Problem(where, f"TensorRT profile has no shape for '{name}'"))
            continue
        if config.max_batch_size > 0 and maxes[name][0] < config.max_batch_size:
            problems.append(
                Problem(
                    where,
                    f"TensorRT max profile batch {maxes[name][0]} for '{name}' does "
                    f"not cover max_batch_size {config.max_batch_size}",
                )
            )
        lo, mid, hi = mins.get(name), opts.get(name), maxes[name]
        ordered = lo and mid and len(lo) == len(mid) == len(hi) and all(
            a <= b <= c for a, b, c in zip(lo, mid, hi, strict=True)
        )
        if lo and mid and not ordered:
            problems.append(
                Problem(where, f"TensorRT profile for '{name}' is not min <= opt <= max")
            )
    return problems


# -- ensembles --------------------------------------------------------------------
def check_ensemble(
    model_dir: Path, config: ModelConfig, models: dict[str, CheckedModel], root: Path
) -> list[Problem]:
    """Steps name existing models and tensors, and every tensor has a producer."""
    where = _rel(model_dir / CONFIG, root)
    problems = []
    steps = config.ensemble_scheduling.step
    if not steps:
        return [Problem(where, "ensemble has no steps")]
    available = {t.name for t in config.input}
    produced = {v for step in steps for v in step.output_map.values()}
    for index, step in enumerate(steps, start=1):
        label = f"step {index} ({step.model_name})"
        target = models.get(step.model_name)
        if target is None:
            problems.append(Problem(where, f"{label}: model '{step.model_name}' is not in the "
                                    "repository"))
            continue
        if target.config is None:
            continue
        if step.model_version > 0 and str(step.model_version) not in target.versions:
            problems.append(Problem(where, f"{label}: version {step.model_version} does not "
                                    "exist"))
        step_inputs = {t.name for t in target.config.input}
        step_outputs = {t.name for t in target.config.output}
        for key, value in step.input_map.items():
            if key not in step_inputs:
                problems.append(
                    Problem(where, f"{label}: '{key}' is not an input of {step.model_name} "
                            f"(inputs: {', '.join(sorted(step_inputs))})")
                )
            if value not in available and value not in produced:
                problems.append(
                    Problem(where, f"{label}: tensor '{value}' is neither an ensemble input "
                            "nor produced by a step")
                )
        for key in step.output_map:
            if key not in step_outputs:
                problems.append(
                    Problem(where, f"{label}: '{key}' is not an output of {step.model_name} "
                            f"(outputs: {', '.join(sorted(step_outputs))})")
                )
        missing = step_inputs - set(step.input_map) - {
            t.name for t in target.config.input if t.optional
        }
        for name in sorted(missing):
            problems.append(Problem(where, f"{label}: input '{name}' of {step.model_name} is "
                                    "not mapped"))
    for tensor in config.output:
        if tensor.name not in produced:
            problems.append(Problem(where, f"output '{tensor.name}' is produced by no step"))
    return problems
