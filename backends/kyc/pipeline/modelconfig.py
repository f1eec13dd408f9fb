"""Model configs read with Triton's own protobuf schema, light enough for a stub.

``model_config_pb2`` ships in ``tritonclient.grpc``, but importing it the usual way
runs ``tritonclient/grpc/__init__.py``, which loads the gRPC client (``cygrpc``)
into every Python-backend stub that reads a config. The generated module itself
needs only protobuf, so :func:`model_config_pb2` loads that one file under its
canonical name: tooling that later imports ``tritonclient.grpc.model_config_pb2``
gets the very same module (one descriptor pool entry, one ``ModelConfig`` class).
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import ModuleType

from google.protobuf import json_format, text_format

_MODULE = "tritonclient.grpc.model_config_pb2"
CONFIG = "config.pbtxt"


def model_config_pb2() -> ModuleType:
    """Triton's ``model_config_pb2``, without ``tritonclient.grpc``'s package init."""
    module = sys.modules.get(_MODULE)
    if module is not None:
        return module
    package = importlib.util.find_spec("tritonclient")
    if package is None or not package.submodule_search_locations:
        raise ImportError("tritonclient is not installed")
    path = Path(package.submodule_search_locations[0]) / "grpc" / "model_config_pb2.py"
    spec = importlib.util.spec_from_file_location(_MODULE, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[_MODULE] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[_MODULE]
        raise
    return module


class ConfigError(ValueError):
    """A config file that Triton could not parse."""


def parse_config(text: str):
    """Protobuf text format -> ``ModelConfig`` (raises :class:`ConfigError`)."""
    try:
        return text_format.Parse(text, model_config_pb2().ModelConfig())
    except text_format.ParseError as exc:
        raise ConfigError(str(exc)) from None


def load_config(path: Path):
    return parse_config(path.read_text(encoding="utf-8"))


def config_dict(config) -> dict:
    """A ``ModelConfig`` as the JSON object Triton hands to ``initialize``."""
    return json_format.MessageToDict(config, preserving_proto_field_name=True)


def instance_count(config: Mapping) -> int:
    """Instances of this model on this server (1 when the config says nothing)."""
    return max(1, sum(int(g.get("count", 1)) for g in config.get("instance_group", [])))


def string_parameters(config: dict) -> dict[str, str]:
    """A config's (JSON form) ``parameters`` as plain strings."""
    return {k: v.get("string_value", "") for k, v in config.get("parameters", {}).items()}


def version_dirs(model_dir: Path) -> list[Path]:
    """Numeric version folders, in version order."""
    found = [p for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit()]
    return sorted(found, key=lambda p: int(p.name))


def served_numbers(config, versions: Iterable[int]) -> list[int]:
    """The version numbers the config's ``version_policy`` serves among ``versions``, in
    order: Triton's rule (``latest`` 1 when the config names none)."""
    ordered = sorted(versions)
    policy = config.version_policy
    choice = policy.WhichOneof("policy_choice")
    if choice == "all":
        return ordered
    if choice == "specific":
        wanted = set(policy.specific.versions)
        return [v for v in ordered if v in wanted]
    latest = policy.latest.num_versions if choice == "latest" else 1
    return ordered[-max(latest, 1) :] if ordered else []


def served_versions(config, versions: Sequence[Path]) -> list[Path]:
    """The numeric version folders Triton loads under the config's ``version_policy``."""
    by_number = {int(v.name): v for v in versions}
    return [by_number[n] for n in served_numbers(config, by_number)]


class Repository:
    """The model folders next to a served model: how one model reads another's config
    (its parameters, batch size, outputs, files) from the one place that owns them."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._configs: dict[str, object] = {}

    def config(self, model: str):
        if model not in self._configs:
            self._configs[model] = load_config(self.root / model / CONFIG)
        return self._configs[model]

    def parameters(self, model: str) -> dict[str, str]:
        return {k: v.string_value for k, v in self.config(model).parameters.items()}

    def max_batch_size(self, model: str) -> int:
        return int(self.config(model).max_batch_size)

    def output_names(self, model: str) -> tuple[str, ...]:
        return tuple(o.name for o in self.config(model).output)

    def latest_version(self, model: str) -> Path:
        """The newest version folder of ``model`` that its ``version_policy`` serves, as
        Triton would (raises when there is none): the one rule the in-process runtime,
        the steps that read another model's files and the model graph follow."""
        served = served_versions(self.config(model), version_dirs(self.root / model))
        if not served:
            raise FileNotFoundError(f"no version of {model} in {self.root} that its "
                                    "version_policy serves")
        return served[-1]
