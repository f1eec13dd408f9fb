"""The graph of a model repository, built from its configs.

Every ``*/config.pbtxt`` is read with Triton's schema; each model becomes a node by
kind, each ensemble's ``ensemble_scheduling`` its steps and the tensors between them,
each Python model's ``*_model`` parameters its calls (as its step declares them,
:mod:`kyc_tools.repo.graph.steps`), and what no ensemble step and no BLS call reaches
the clients'.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from kyc.pipeline.contract import BLS, Use
from kyc_tools.repo.check import CONFIG
from kyc_tools.repo.config import ConfigError, ModelConfig, load_config, model_kind
from kyc_tools.repo.graph.elements import (
    KIND_LABELS,
    OTHER,
    SEQUENCE,
    Call,
    Flow,
    Graph,
    Model,
    Step,
    Unresolved,
)
from kyc_tools.repo.graph.steps import declared_uses, glue_target

MODEL_PARAMETER_SUFFIX = "_model"
MAX_ACTS_AS_DEPTH = 4


def read_configs(repository: Path) -> dict[str, ModelConfig]:
    """Every model folder's config, by folder name (Triton's name of the model)."""
    configs = {}
    for path in sorted(repository.glob(f"*/{CONFIG}")):
        if path.parent.name.startswith("."):
            continue
        try:
            configs[path.parent.name] = load_config(path)
        except ConfigError as exc:
            raise ConfigError(f"{path}: {exc}") from None
    return configs


def _kind(config: ModelConfig) -> str:
    if config.HasField("sequence_batching"):
        return SEQUENCE
    kind = model_kind(config).name
    return kind if kind in KIND_LABELS else OTHER


def _sequence_controls(config: ModelConfig) -> tuple[str, ...]:
    kinds = config.sequence_batching.Control
    wanted = (kinds.CONTROL_SEQUENCE_START, kinds.CONTROL_SEQUENCE_END)
    found = []
    for want in wanted:
        found += [c.name for c in config.sequence_batching.control_input
                  if any(ctl.kind == want for ctl in c.control)]
    return tuple(found)


def _model(name: str, config: ModelConfig) -> Model:
    return Model(
        name=name,
        kind=_kind(config),
        runtime=(f"backend {config.backend}" if config.backend else
                 f"platform {config.platform}" if config.platform else "no backend or platform"),
        max_batch_size=config.max_batch_size,
        inputs=tuple(sorted(t.name for t in config.input)),
        outputs=tuple(sorted(t.name for t in config.output)),
        sequence_controls=_sequence_controls(config),
    )


def ensemble_flows(name: str, config: ModelConfig) -> tuple[list[Step], list[Flow]]:
    """An ensemble's steps and the tensors between them (a tensor no one produces,
    or that no one reads, draws no edge: ``kyc repo check`` reports the first)."""
    steps = [Step(name, index, s.model_name, s.model_version)
             for index, s in enumerate(config.ensemble_scheduling.step, start=1)]
    producer = {t.name: 0 for t in config.input}
    for index, step in enumerate(config.ensemble_scheduling.step, start=1):
        for tensor in step.output_map.values():
            producer.setdefault(tensor, index)
    edges: dict[tuple[int, int], set[str]] = {}
    for index, step in enumerate(config.ensemble_scheduling.step, start=1):
        for tensor in step.input_map.values():
            if tensor in producer:
                edges.setdefault((producer[tensor], index), set()).add(tensor)
    for tensor in (t.name for t in config.output):
        if tensor in producer:
            edges.setdefault((producer[tensor], 0), set()).add(tensor)
    flows = [Flow(name, source, target, tuple(sorted(tensors)))
             for (source, target), tensors in sorted(edges.items())]
    return steps, flows


def model_references(config: ModelConfig) -> dict[str, str]:
    """The string ``parameters`` whose key ends in ``_model``, empty ones left out
    (not configured)."""
    return {key: value.string_value for key, value in sorted(config.parameters.items())
            if key.endswith(MODEL_PARAMETER_SUFFIX) and value.string_value}


def _calls(caller: str, references: dict[str, str], uses: dict[str, Use],
           configs: dict[str, ModelConfig], prefix: str = "", depth: int = 0
           ) -> tuple[list[Call], list[Unresolved]]:
    calls: list[Call] = []
    unresolved: list[Unresolved] = []
    for key, value in references.items():
        use = uses.get(key, Use(BLS) if not depth else None)
        if use is None:  # not a parameter of the step acted as
            continue
        if value not in configs:
            unresolved.append(Unresolved(caller, prefix + key, value))
            continue
        calls.append(Call(caller, value, use.kind, prefix + key, use.budget))
        if use.acts_as is not None and depth < MAX_ACTS_AS_DEPTH:
            more, missing = _calls(caller, model_references(configs[value]),
                                   declared_uses(use.acts_as), configs,
                                   f"{prefix}{key}.", depth + 1)
            calls += more
            unresolved += missing
    return calls, unresolved


def python_calls(repository: Path, configs: dict[str, ModelConfig]
                 ) -> tuple[list[Call], list[Unresolved]]:
    """What the Python models call by BLS or read the settings of (their steps'
    declared uses, :func:`kyc_tools.repo.graph.steps.declared_uses`)."""
    calls: list[Call] = []
    unresolved: list[Unresolved] = []
    for name, config in configs.items():
        if model_kind(config).name != "python":
            continue
        uses = declared_uses(glue_target(repository / name, config))
        more, missing = _calls(name, model_references(config), uses, configs)
        calls += more
        unresolved += missing
    return calls, unresolved


def build_graph(repository: Path) -> Graph:
    """The graph of the models of ``repository`` (raises :class:`ConfigError` on a
    config Triton could not parse, ``NotADirectoryError`` if it is no folder)."""
    if not repository.is_dir():
        raise NotADirectoryError(f"{repository} is not a directory")
    configs = read_configs(repository)
    steps: list[Step] = []
    flows: list[Flow] = []
    for name, config in configs.items():
        if config.platform == "ensemble":
            found_steps, found_flows = ensemble_flows(name, config)
            steps += found_steps
            flows += found_flows
    calls, unresolved = python_calls(repository, configs)
    unresolved += [Unresolved(s.ensemble, f"step {s.index}", s.model) for s in steps
                   if s.model not in configs]
    models = [dataclasses.replace(_model(name, config), step=glue_target(repository / name, config))
              if model_kind(config).name == "python" else _model(name, config)
              for name, config in configs.items()]
    called = {s.model for s in steps} | {c.callee for c in calls if c.kind == BLS}
    clients = [m.name for m in models if m.kind == SEQUENCE or m.name not in called]
    return Graph(
        name=repository.resolve().name,
        models=tuple(sorted(models, key=lambda m: m.name)),
        steps=tuple(sorted(steps, key=lambda s: (s.ensemble, s.index))),
        flows=tuple(sorted(flows, key=lambda f: (f.ensemble, f.source, f.target))),
        calls=tuple(sorted(set(calls), key=lambda c: (c.caller, c.callee, c.kind, c.parameter))),
        clients=tuple(sorted(clients)),
        unresolved=tuple(sorted(set(unresolved),
                                key=lambda u: (u.model, u.where, u.value))),
    )
