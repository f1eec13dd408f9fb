"""The server a measure runs through: a private Triton over a view of the repository.

The view is a temporary folder of links to the repository's model folders, but for the
model measured: its folder holds a link to the ONE version measured and a config
written from the repository's, with ``version_policy`` that version and any
parameters changed (``kyc eval liveness``'s fixed challenge). Explicit model control:
only the models the measure's entry runs through are loaded (its ensemble steps and
BLS calls, from ``kyc_tools.repo.graph``); the other folders are there for the settings the
steps read. Nothing in the repository changes, so a version dropped in but not yet
served (a ``version_policy`` that leaves it out) is measured as it would serve, and no
client of a production server sees it.

One server per version, not one server reloading the model through the model-control
API: a Python model reloaded that way (liveness_sequence with a config override)
crashed Triton 2.51 with heap corruption in the Python backend in 3 of 4 runs here
(``malloc(): unaligned tcache chunk detected`` after the old instances unloaded). A
start costs about 4 s.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from kyc_tools.operator.server import (
    ServerError,
    ServerOptions,
    TritonServer,
    start_until_ready,
)
from kyc_tools.repo.config import load_config, model_parameters
from kyc_tools.repo.graph.build import build_graph
from kyc_tools.repo.graph.derive import runs_through

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 300.0
STOP_GRACE_S = 30.0


class EvalError(RuntimeError):
    """A measure that cannot run: its message says why and what to do."""


def served_closure(repository: Path, entries: Sequence[str]) -> list[str]:
    """``entries`` and every model they run through (ensemble steps, BLS calls), sorted.
    Models only read for their settings are not loaded: the steps read the configs
    from the repository's files."""
    graph = build_graph(repository)
    names = {m.name for m in graph.models}
    missing = [e for e in entries if e not in names]
    if missing:
        raise EvalError(f"{repository} has no model {', '.join(missing)}")
    return sorted(runs_through(graph, entries))


def versions_on_disk(repository: Path, model: str) -> list[int]:
    """The numbered version folders of ``model``, ascending."""
    folder = repository / model
    return sorted(int(p.name) for p in folder.iterdir() if p.is_dir() and p.name.isdigit())


@contextlib.contextmanager
def with_candidate(repository: Path, model: str, candidates: Sequence[Path] | Path | None
                   ) -> Iterator[Path]:
    """``repository``; or, with ``candidates`` (each a version folder, or its one model
    file), a temporary view of it where they are ``model``'s next versions in order,
    beside the versions on disk: measured before one is dropped into a repository a
    server may be serving (where ``version_policy`` "latest" would serve it at once).
    Nothing in the repository changes."""
    candidates = [candidates] if isinstance(candidates, Path) else list(candidates or ())
    if not candidates:
        yield repository
        return
    for candidate in candidates:
        if not candidate.exists():
            raise EvalError(f"{candidate} does not exist")
    if not (repository / model / "config.pbtxt").is_file():
        raise EvalError(f"{repository} has no model {model}")
    with tempfile.TemporaryDirectory(prefix="kyc-candidate-") as tmp:
        view = Path(tmp)
        _link_models(repository.resolve(), view, but=model)
        (view / model).mkdir()
        for entry in sorted((repository / model).resolve().iterdir()):
            if not entry.name.startswith("."):
                (view / model / entry.name).symlink_to(entry)
        name = load_config(repository / model / "config.pbtxt").default_model_filename
        for candidate in candidates:
            target = view / model / str(max(versions_on_disk(view, model), default=0) + 1)
            if candidate.is_dir():
                target.symlink_to(candidate.resolve(), target_is_directory=True)
            else:
                target.mkdir()
                (target / (name or "model.onnx")).symlink_to(candidate.resolve())
            log.info("%s: %s measured as version %s", model, candidate, target.name)
        yield view


def pick_versions(repository: Path, model: str, asked: Sequence[int] | None) -> list[int]:
    """``asked`` (each must be on disk), or every version on disk."""
    found = versions_on_disk(repository, model)
    if not found:
        raise EvalError(f"{model} has no numbered version folder in {repository}")
    if not asked:
        return found
    absent = [v for v in asked if v not in found]
    if absent:
        raise EvalError(f"{model} has no version {', '.join(map(str, absent))} in "
                        f"{repository} (on disk: {', '.join(map(str, found))})")
    return list(asked)


def onnx_output_dims(path: Path) -> dict[str, list[int | None]]:
    """Each graph output's dims less the batch dimension (None where dynamic), read
    without the weights' external data, as ``kyc repo check`` reads them."""
    import onnx

    from kyc_tools.repo.check import onnx_dims

    model = onnx.load(str(path), load_external_data=False)
    return {output.name: (onnx_dims(output) or [None])[1:] for output in model.graph.output}


def write_view(repository: Path, view: Path, model: str | None, version: int | None,
               parameters: Mapping[str, str] | None = None) -> Path:
    """The view of ``repository`` in ``view`` (see the module docstring)."""
    from google.protobuf import text_format

    view.mkdir(parents=True, exist_ok=True)
    _link_models(repository, view, but=model)
    if model is None or version is None:
        return view
    source = repository / model
    config = load_config(source / "config.pbtxt")
    config.version_policy.Clear()
    config.version_policy.specific.versions[:] = [version]
    for key, value in (parameters or {}).items():
        config.parameters[key].string_value = str(value)
    fit_outputs(config, source / str(version))
    (view / model).mkdir()
    (view / model / str(version)).symlink_to(source / str(version), target_is_directory=True)
    (view / model / "config.pbtxt").write_text(text_format.MessageToString(config))
    return view


def _link_models(repository: Path, view: Path, but: str | None) -> None:
    """A link in ``view`` to each model folder of ``repository`` but ``but``."""
    for folder in sorted(repository.iterdir()):
        if folder.is_dir() and not folder.name.startswith(".") and folder.name != but:
            (view / folder.name).symlink_to(folder, target_is_directory=True)


def fit_outputs(config: Any, version_dir: Path) -> None:
    """An ONNX version whose outputs have other dims than the config (a 512-d embedding
    published after a 128-d one, or the reverse) gets its own dims: Triton refuses a
    config that disagrees with the graph."""
    if config.platform != "onnxruntime_onnx" and config.backend != "onnxruntime":
        return
    path = version_dir / (config.default_model_filename or "model.onnx")
    if not path.is_file():
        return
    dims = onnx_output_dims(path)
    for output in config.output:
        found = dims.get(output.name)
        if found and all(d is not None for d in found) and list(output.dims) != found:
            log.info("%s version %s: %s dims %s (config %s)", config.name, version_dir.name,
                     output.name, found, list(output.dims))
            output.dims[:] = found


class EvalServer:
    """A private Triton over a view of ``repository`` serving ``entries`` and what they
    run through, with ``model`` at ``version`` (and ``parameters``) where given."""

    def __init__(self, repository: Path, entries: Sequence[str], model: str | None = None,
                 version: int | None = None, parameters: Mapping[str, str] | None = None):
        self.repository = repository.resolve()
        self.models = served_closure(self.repository, entries)
        self.model, self.version = model, version
        self._tmp = tempfile.TemporaryDirectory(prefix="kyc-eval-")
        tmp = Path(self._tmp.name)
        self.view = write_view(self.repository, tmp / "models", model, version, parameters)
        self.log_file = tmp / "tritonserver.log"
        # Inference open by name: a private server on free loopback ports for this one
        # measure, whose calls (kyc_tools.dev.eval's raw tritonclient calls) carry no key.
        options = ServerOptions.on_free_ports(self.view, model_control="explicit",
                                              load_models=tuple(self.models),
                                              open_inference=True)
        self.server = TritonServer(options, log_file=self.log_file)

    @property
    def grpc_url(self) -> str:
        return self.server.options.grpc_url

    def __enter__(self) -> EvalServer:
        log.info("starting a private tritonserver over %s with %s%s", self.repository,
                 ", ".join(self.models),
                 f" ({self.model} version {self.version})" if self.model else "")
        try:
            start_until_ready(self.server, timeout_s=READY_TIMEOUT_S, stop_grace_s=STOP_GRACE_S)
        except ServerError as exc:  # stopped; its message ends with the server log's tail
            self._tmp.cleanup()
            what = f"{self.model} version {self.version}" if self.model else "the server"
            raise EvalError(f"{what} did not start: {exc}") from None
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.server.stop(grace=STOP_GRACE_S)
        self._tmp.cleanup()

    @contextlib.contextmanager
    def client(self) -> Iterator[Any]:
        import tritonclient.grpc as grpcclient

        client = grpcclient.InferenceServerClient(self.grpc_url)
        try:
            yield client
        finally:
            client.close()

    def config(self, model: str) -> dict[str, Any]:
        """``model``'s config as the server loaded it."""
        with self.client() as client:
            return client.get_model_config(model, as_json=True)["config"]

    def parameters(self, model: str) -> dict[str, str]:
        """``model``'s string parameters as its config file in the view says."""
        return model_parameters(self.view, model)
