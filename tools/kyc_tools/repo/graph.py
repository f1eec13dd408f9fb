"""``kyc repo graph``: the model graph of a repository, drawn from its configs.

Every ``*/config.pbtxt`` of a model repository is read with Triton's schema
(:func:`kyc_tools.repo.config.load_config`) and becomes a :class:`Graph`:

- a node per model, by kind (ensemble, Python model, ONNX model, sequence-batched
  model...), with its backend or platform and ``max_batch_size``;
- per ensemble, its steps (``ensemble_scheduling.step``, numbered from 1 as
  ``kyc repo check`` numbers them) and the tensors that flow between them: from
  the ensemble's inputs into the steps that read them (``input_map``), from a
  step's ``output_map`` into the later steps and the ensemble's outputs;
- the calls of Python models to other models, read from their string
  ``parameters`` whose key ends in ``_model``: by BLS (the model infers on it) or
  for its settings (the model reads that model's config parameters), as the
  step declares in its CONTRACT (:mod:`kyc.pipeline.contract`); an empty value is a model not
  configured, a value naming no model of the repository is kept aside
  (:attr:`Graph.unresolved`) and drawn as a comment;
- the clients: a sequence-batched model is called by clients directly (START ...
  END), and so is every model that no ensemble step and no BLS call reaches.

:func:`to_mermaid` and :func:`to_dot` render it as text (Mermaid ``flowchart LR``,
Graphviz DOT), sorted so that the same repository always gives the same text
(docs/model-graph.mmd is the shipped repository's)::

    kyc repo graph [REPOSITORY] [--format mermaid|dot] [--output FILE]
    python -m kyc_tools.repo.graph model_repository --output docs/model-graph.mmd
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kyc.budgets import BUDGETS_MS, StepMap
from kyc.pipeline.contract import BLS, SETTINGS, Contract, Use, contract_of, contract_problems
from kyc_tools.repo.check import CONFIG, served_versions, version_dirs
from kyc_tools.repo.config import ConfigError, ModelConfig, load_config, model_kind

DEFAULT_REPOSITORY = Path("model_repository")
FORMATS = ("mermaid", "dot")

# Kinds of model nodes (and of the other nodes, for their style).
ENSEMBLE = "ensemble"
PYTHON = "python"
ONNX = "onnx"
TENSORRT = "tensorrt"
SEQUENCE = "sequence"
OTHER = "other"
STEP = "step"
OUTPUTS = "outputs"
CLIENT = "client"

KIND_LABELS = {
    ENSEMBLE: "ensemble",
    PYTHON: "python step",
    ONNX: "onnx model",
    TENSORRT: "tensorrt model",
    SEQUENCE: "sequence-batched model",
    OTHER: "model",
}

# A step's use of the models its ``*_model`` parameters name is its own declaration
# (kyc.pipeline.contract: the CONTRACT of the step class its glue file serves). A Python
# model whose step declares none: each of them is a BLS call.
NO_CONTRACT: dict[str, Use] = {}
MODEL_PARAMETER_SUFFIX = "_model"
MAX_ACTS_AS_DEPTH = 4

_GLUE_TARGET = re.compile(r"""triton_model\(\s*["']([\w.]+:\w+)["']\s*\)""")
_GLUE_IMPORT = re.compile(r"^from\s+([\w.]+)\s+import\s+(\w+)", re.MULTILINE)


@dataclass(frozen=True)
class Model:
    name: str
    kind: str  # ENSEMBLE, PYTHON, ONNX, TENSORRT, SEQUENCE or OTHER
    runtime: str  # "backend python", "platform onnxruntime_onnx": what the config names
    max_batch_size: int
    inputs: tuple[str, ...]  # sorted
    outputs: tuple[str, ...]  # sorted
    sequence_controls: tuple[str, ...] = ()  # its START and END control inputs
    step: str | None = None  # a Python model's step class, "module:Class" (its glue file)


@dataclass(frozen=True)
class Step:
    ensemble: str
    index: int  # from 1, in the order of ensemble_scheduling.step
    model: str
    version: int  # -1: the latest


@dataclass(frozen=True)
class Flow:
    """Tensors of an ensemble from one producer to one consumer.

    ``source`` 0: the ensemble's inputs; ``target`` 0: the ensemble's outputs; else
    a step's :attr:`Step.index`. ``tensors``: the ensemble's names of them.
    """

    ensemble: str
    source: int
    target: int
    tensors: tuple[str, ...]


@dataclass(frozen=True)
class Call:
    """``caller`` uses ``callee``: by BLS or for its settings, as ``parameter`` says
    (``face_model.detector_model``: the callee named by the parameters of the model
    that ``face_model`` names)."""

    caller: str
    callee: str
    kind: str  # BLS or SETTINGS
    parameter: str
    budget: str | None = None  # the budget step the callee's work counts to (None: caller's)


@dataclass(frozen=True)
class Unresolved:
    """A reference to no model of the repository: ``model``'s ``where`` (a
    ``*_model`` parameter, or an ensemble's ``step 2``) names ``value``."""

    model: str
    where: str
    value: str


@dataclass(frozen=True)
class Graph:
    name: str  # the repository folder's name
    models: tuple[Model, ...]  # by name
    steps: tuple[Step, ...]  # by ensemble, then index
    flows: tuple[Flow, ...]  # sorted
    calls: tuple[Call, ...]  # sorted
    clients: tuple[str, ...]  # the models clients call directly, by name
    unresolved: tuple[Unresolved, ...] = ()

    def model(self, name: str) -> Model:
        for model in self.models:
            if model.name == name:
                return model
        raise KeyError(name)

    def ensemble_steps(self, ensemble: str) -> tuple[Step, ...]:
        return tuple(s for s in self.steps if s.ensemble == ensemble)


# -- building ---------------------------------------------------------------------
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


def glue_target(model_dir: Path, config: ModelConfig) -> str | None:
    """``kyc.face.step:FacePreprocessStep``: the step a Python model's glue file
    serves (the newest served version's model.py), or None."""
    served = served_versions(config, version_dirs(model_dir)) if model_dir.is_dir() else []
    if not served:
        return None
    path = served[-1] / (config.default_model_filename or "model.py")
    if not path.is_file():
        return None
    text = path.read_text(encoding="utf-8")
    match = _GLUE_TARGET.search(text)
    if match:
        return match.group(1)
    match = _GLUE_IMPORT.search(text)
    return f"{match.group(1)}:{match.group(2)}" if match else None


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


def declared_uses(target: str | None) -> dict[str, Use]:
    """How the step class ``target`` ("module:Class") uses each ``*_model`` parameter,
    from its CONTRACT (empty: no target, or a step that declares none)."""
    contract = _contract(target)
    return dict(contract.uses) if contract is not None else NO_CONTRACT


def python_calls(repository: Path, configs: dict[str, ModelConfig]
                 ) -> tuple[list[Call], list[Unresolved]]:
    """What the Python models call by BLS or read the settings of (their steps'
    declared uses, :func:`declared_uses`)."""
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


# -- what the graph derives -------------------------------------------------------
def runs_through(graph: Graph, entries: Sequence[str]) -> set[str]:
    """``entries`` and every model a request of them runs through: ensemble steps and
    BLS calls, followed to the end. Models only read for their settings are not in it:
    the steps read those from the repository's files."""
    names = {m.name for m in graph.models}
    needed, todo = set(), list(entries)
    while todo:
        name = todo.pop()
        if name not in needed:
            needed.add(name)
            todo += [s.model for s in graph.ensemble_steps(name)]
            todo += [c.callee for c in graph.calls if c.caller == name and c.kind == BLS]
    return needed & names


def entry_models(graph: Graph, entry: str) -> tuple[str, ...]:
    """The models whose statistics make up a request of ``entry``: it first, then every
    model it runs through, by name (the bench reads these)."""
    return (entry, *sorted(runs_through(graph, [entry]) - {entry}))


def step_map(graph: Graph) -> StepMap:
    """Each model's step of the latency budgets, derived (kyc.budgets.StepMap).

    A Python model's is its step's declaration (CONTRACT.budget). Another model's is
    the budget of the steps that run it: the Python models that call it by BLS (or the
    budget that call declares), and, for a model an ensemble runs, the Python steps
    that feed it; of several, the tightest, which its queue must not break.
    """
    own = {}
    for model in graph.models:
        contract = _contract(model.step)
        if contract is not None:
            own[model.name] = contract.budget
    candidates: dict[str, set[str]] = {}
    for call in graph.calls:
        if call.kind == BLS and call.caller in own:
            candidates.setdefault(call.callee, set()).add(call.budget or own[call.caller])
    for flow in graph.flows:
        if flow.source and flow.target:
            source, target = (graph.ensemble_steps(flow.ensemble)[i - 1].model
                              for i in (flow.source, flow.target))
            if source in own:
                candidates.setdefault(target, set()).add(own[source])
    derived = {model: min(budgets, key=lambda b: (BUDGETS_MS[b], b))
               for model, budgets in candidates.items() if model not in own}
    sequence = frozenset(m.name for m in graph.models if m.kind == SEQUENCE)
    return StepMap({**own, **derived}, sequence)


def contract_mismatches(graph: Graph, repository: Path) -> list[str]:
    """Where a Python model's config and its step's CONTRACT disagree: tensors, the
    ``*_model`` parameters, or the declaration itself, one ``MODEL/config.pbtxt: ...``
    line each (empty: they agree). ``kyc repo check`` prints them; the watcher's check of
    a dropped version does not run it (a version folder brings no config, and it would
    import every step into ``kyc serve``'s process)."""
    configs = read_configs(repository)
    problems = []
    for model in graph.models:
        contract = _contract(model.step)
        if contract is None:
            continue
        config = configs[model.name]
        unknown = set(model_references(config)) - set(contract.model_settings())
        found = [*contract_problems(contract), *_tensor_mismatches(config, contract),
                 *(f"parameter {k} names a model {model.step} does not use"
                   for k in sorted(unknown))]
        problems += [f"{model.name}/{CONFIG}: {p}" for p in found]
    return problems


def _tensor_mismatches(config: ModelConfig, contract: Contract) -> list[str]:
    required = {t.name for t in config.input if not t.optional}
    optional = {t.name for t in config.input if t.optional}
    outputs = {t.name for t in config.output}
    found = []
    if required != set(contract.inputs):
        found.append(f"required inputs {sorted(required)} != declared {sorted(contract.inputs)}")
    if optional - contract.optional_inputs:
        found.append(f"optional inputs {sorted(optional - contract.optional_inputs)} undeclared")
    if outputs != set(contract.outputs):
        found.append(f"outputs {sorted(outputs)} != declared {sorted(contract.outputs)}")
    return found


def _contract(target: str | None) -> Contract | None:
    """The CONTRACT of a glue file's step class; None when there is no target, or it
    names no importable class (a model graph is drawn for any repository)."""
    if not target:
        return None
    try:
        return contract_of(target)
    except (ImportError, AttributeError, ValueError):
        return None


# -- rendering --------------------------------------------------------------------
_UNSAFE = re.compile(r"[^A-Za-z0-9_]")


def safe_id(prefix: str, name: str) -> str:
    """A node id that Mermaid and DOT take as it is: ``prefix`` + ``name`` with its
    other characters as ``_`` (then a checksum of the name, so that ``a-b`` and
    ``a_b`` stay two nodes)."""
    safe = _UNSAFE.sub("_", name)
    if safe != name or not name:
        safe += f"_{zlib.crc32(name.encode()):08x}"
    return f"{prefix}_{safe}"


def model_id(name: str) -> str:
    return safe_id("m", name)


def step_id(ensemble: str, index: int) -> str:
    return f"{safe_id('e', ensemble)}__step{index}"


def outputs_id(ensemble: str) -> str:
    return f"{safe_id('e', ensemble)}__outputs"


def cluster_id(ensemble: str) -> str:
    return safe_id("cluster", ensemble)


CLIENT_ID = "clients"


@dataclass(frozen=True)
class _Node:
    id: str
    lines: tuple[str, ...]
    kind: str


@dataclass(frozen=True)
class _Edge:
    source: str
    target: str
    label: str
    kind: str  # "data", "runs", BLS, SETTINGS, CLIENT


@dataclass(frozen=True)
class _Cluster:
    id: str
    title: str
    nodes: tuple[_Node, ...]
    edges: tuple[_Edge, ...]


@dataclass(frozen=True)
class _Layout:
    """What both renderers draw, in the order they draw it."""

    comments: tuple[str, ...]
    nodes: tuple[_Node, ...]  # outside every ensemble
    clusters: tuple[_Cluster, ...]
    edges: tuple[_Edge, ...]  # between clusters and nodes


def _model_node(model: Model) -> _Node:
    return _Node(model_id(model.name), (
        model.name,
        f"{KIND_LABELS[model.kind]}, {model.runtime}",
        f"max_batch_size {model.max_batch_size}",
    ), model.kind)


def _client_label(model: Model) -> str:
    if model.kind == SEQUENCE and model.sequence_controls:
        return f"sequence {' ... '.join(model.sequence_controls)}: {', '.join(model.inputs)}"
    return ", ".join(model.inputs)


def _layout(graph: Graph) -> _Layout:
    comments = [
        f"The model graph of {graph.name}, drawn from its */config.pbtxt by kyc repo graph.",
        "Edges: tensors between ensemble steps (solid, named), the model a step runs "
        "(dotted), BLS calls (bold), settings read from another model's config "
        "(dotted, named), clients.",
    ]
    comments += [f"unresolved: {u.model} {u.where} names {u.value!r}, no model of "
                 f"{graph.name}" for u in graph.unresolved]
    ensembles = {s.ensemble for s in graph.steps} | {
        m.name for m in graph.models if m.kind == ENSEMBLE}
    names = {m.name for m in graph.models}
    nodes = [_model_node(m) for m in graph.models if m.name not in ensembles]
    if graph.clients:
        nodes.insert(0, _Node(CLIENT_ID, ("clients",), CLIENT))
    clusters = []
    edges = []
    for ensemble in sorted(ensembles):
        steps = graph.ensemble_steps(ensemble)
        inner = [_model_node(graph.model(ensemble))]
        inner += [_Node(step_id(ensemble, s.index), (
            f"step {s.index}: {s.model}" + (f" v{s.version}" if s.version > 0 else ""),), STEP)
            for s in steps]
        inner.append(_Node(outputs_id(ensemble), (f"{ensemble} outputs",), OUTPUTS))

        def end(index: int, ensemble: str = ensemble) -> str:
            return step_id(ensemble, index) if index else model_id(ensemble)

        inner_edges = [_Edge(end(f.source), step_id(ensemble, f.target) if f.target
                             else outputs_id(ensemble), ", ".join(f.tensors), "data")
                       for f in graph.flows if f.ensemble == ensemble]
        clusters.append(_Cluster(cluster_id(ensemble), f"ensemble {ensemble}",
                                 tuple(inner), tuple(inner_edges)))
        edges += [_Edge(step_id(ensemble, s.index), model_id(s.model), "", "runs")
                  for s in steps if s.model in names]
    edges += [_Edge(model_id(c.caller), model_id(c.callee), f"{c.kind} {c.parameter}", c.kind)
              for c in graph.calls]
    edges += [_Edge(CLIENT_ID, model_id(name), _client_label(graph.model(name)), CLIENT)
              for name in graph.clients]
    return _Layout(tuple(comments), tuple(nodes), tuple(clusters), tuple(edges))


@dataclass(frozen=True)
class Look:
    """How a kind of node is drawn: colours, Mermaid's shape brackets, DOT's shape."""

    fill: str
    stroke: str
    mermaid: tuple[str, str]
    dot: str


LOOKS = {
    ENSEMBLE: Look("#e8f0fe", "#1a73e8", ("[[", "]]"), "box3d"),
    PYTHON: Look("#e6f4ea", "#188038", ("(", ")"), "box"),
    ONNX: Look("#fef7e0", "#b06000", ("[(", ")]"), "cylinder"),
    TENSORRT: Look("#fef7e0", "#b06000", ("[(", ")]"), "cylinder"),
    SEQUENCE: Look("#fce8e6", "#c5221f", ("{{", "}}"), "hexagon"),
    OTHER: Look("#f1f3f4", "#5f6368", ("[", "]"), "box"),
    STEP: Look("#ffffff", "#5f6368", ("[", "]"), "box"),
    OUTPUTS: Look("#e8f0fe", "#1a73e8", ("([", "])"), "ellipse"),
    CLIENT: Look("#f3e8fd", "#8430ce", ("([", "])"), "ellipse"),
}
_MERMAID_ARROWS = {"data": "-->", "runs": "-.->", BLS: "==>", SETTINGS: "-.->", CLIENT: "-->"}


def _mermaid_text(text: str) -> str:
    return text.replace("&", "#amp;").replace('"', "#quot;").replace("<", "#lt;") \
        .replace(">", "#gt;")


def _mermaid_node(node: _Node) -> str:
    start, stop = LOOKS[node.kind].mermaid
    label = "<br/>".join(_mermaid_text(line) for line in node.lines)
    return f'{node.id}{start}"{label}"{stop}:::{node.kind}'


def _mermaid_edge(edge: _Edge) -> str:
    arrow = _MERMAID_ARROWS[edge.kind]
    label = f'|"{_mermaid_text(edge.label)}"|' if edge.label else ""
    return f"{edge.source} {arrow}{label} {edge.target}"


def to_mermaid(graph: Graph) -> str:
    """Mermaid ``flowchart LR`` text of the graph."""
    layout = _layout(graph)
    lines = ["flowchart LR"]
    lines += [f"  %% {c}" for c in layout.comments]
    lines += [f"  classDef {kind} fill:{look.fill},stroke:{look.stroke}"
              + (",stroke-dasharray:4 3" if kind == STEP else "")
              for kind, look in LOOKS.items()]
    lines += [f"  {_mermaid_node(n)}" for n in layout.nodes]
    for cluster in layout.clusters:
        lines.append(f'  subgraph {cluster.id}["{_mermaid_text(cluster.title)}"]')
        lines.append("    direction LR")
        lines += [f"    {_mermaid_node(n)}" for n in cluster.nodes]
        lines += [f"    {_mermaid_edge(e)}" for e in cluster.edges]
        lines.append("  end")
    lines += [f"  {_mermaid_edge(e)}" for e in layout.edges]
    return "\n".join(lines) + "\n"


_DOT_EDGE_STYLES = {
    "data": "",
    "runs": "style=dotted, arrowhead=empty",
    BLS: "style=bold",
    SETTINGS: "style=dashed",
    CLIENT: "",
}


def _dot_text(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _dot_node(node: _Node) -> str:
    look = LOOKS[node.kind]
    style = "rounded,filled" if node.kind in (PYTHON, STEP) else "filled"
    if node.kind == STEP:
        style += ",dashed"
    label = "\\n".join(_dot_text(line) for line in node.lines)
    return (f'{node.id} [label="{label}", shape={look.dot}, style="{style}", '
            f'fillcolor="{look.fill}", color="{look.stroke}"];')


def _dot_edge(edge: _Edge) -> str:
    attrs = [f'label="{_dot_text(edge.label)}"'] if edge.label else []
    if _DOT_EDGE_STYLES[edge.kind]:
        attrs.append(_DOT_EDGE_STYLES[edge.kind])
    return f"{edge.source} -> {edge.target}" + (f" [{', '.join(attrs)}]" if attrs else "") + ";"


def to_dot(graph: Graph) -> str:
    """Graphviz DOT text of the graph (``dot -Tsvg`` draws it)."""
    layout = _layout(graph)
    lines = ["digraph model_graph {"]
    lines += [f"  // {c}" for c in layout.comments]
    lines += [
        "  rankdir=LR;",
        '  node [fontname="Helvetica", fontsize=11];',
        '  edge [fontname="Helvetica", fontsize=9];',
    ]
    lines += [f"  {_dot_node(n)}" for n in layout.nodes]
    for cluster in layout.clusters:
        lines.append(f"  subgraph {cluster.id} {{")
        lines.append(f'    label="{_dot_text(cluster.title)}"; style="rounded"; '
                     f'color="{LOOKS[ENSEMBLE].stroke}";')
        lines += [f"    {_dot_node(n)}" for n in cluster.nodes]
        lines += [f"    {_dot_edge(e)}" for e in cluster.edges]
        lines.append("  }")
    lines += [f"  {_dot_edge(e)}" for e in layout.edges]
    lines.append("}")
    return "\n".join(lines) + "\n"


RENDERERS = {"mermaid": to_mermaid, "dot": to_dot}


# -- command line -----------------------------------------------------------------
def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("repository", type=Path, nargs="?", default=DEFAULT_REPOSITORY,
                        help=f"a model repository (default: {DEFAULT_REPOSITORY})")
    parser.add_argument("--format", choices=FORMATS, default=FORMATS[0],
                        help="Mermaid flowchart (default) or Graphviz DOT")
    parser.add_argument("--output", type=Path, help="write it to this file (default: stdout)")
    parser.set_defaults(func=cmd_graph)


def add_graph_parser(repo_subparsers) -> argparse.ArgumentParser:
    """``kyc repo graph``: add it to the ``kyc repo`` sub-commands."""
    parser = repo_subparsers.add_parser(
        "graph", help="draw the model graph of a repository (Mermaid or DOT), from its configs")
    _add_arguments(parser)
    return parser


def cmd_graph(args: argparse.Namespace) -> int:
    try:
        graph = build_graph(args.repository)
    except (ConfigError, OSError) as exc:
        sys.stderr.write(f"kyc repo graph: {exc}\n")
        return 1
    for u in graph.unresolved:
        sys.stderr.write(f"kyc repo graph: warning: {u.model} {u.where} names {u.value!r}, "
                         f"no model of {args.repository}\n")
    text = RENDERERS[args.format](graph)
    if args.output is None:
        sys.stdout.write(text)
        return 0
    try:
        args.output.write_text(text, encoding="utf-8")
    except OSError as exc:
        sys.stderr.write(f"kyc repo graph: {exc}\n")
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kyc_tools.repo.graph", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_arguments(parser)
    return cmd_graph(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
