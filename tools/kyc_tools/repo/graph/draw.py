"""The graph drawn as text: Mermaid ``flowchart LR`` and Graphviz DOT.

Both renderers draw one layout (:func:`_layout`: the nodes outside every ensemble, one
cluster per ensemble with its steps and the tensors between them, then the edges between
them), sorted so that the same repository always gives the same text (docs/model-graph.mmd
is the shipped repository's).
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass

from kyc.pipeline.contract import BLS, SETTINGS
from kyc_tools.repo.graph.elements import (
    CLIENT,
    ENSEMBLE,
    KIND_LABELS,
    ONNX,
    OTHER,
    OUTPUTS,
    PYTHON,
    SEQUENCE,
    STEP,
    TENSORRT,
    Graph,
    Model,
)

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
