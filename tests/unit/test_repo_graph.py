"""`kyc repo graph`: the model graph drawn from the configs, as Mermaid and DOT text."""

from __future__ import annotations

import argparse
import base64
import re
from pathlib import Path

import pytest

from kyc.pipeline.contract import BLS, SETTINGS
from kyc.pipeline.triton import served_step
from kyc_testing import (
    PROJECT_ROOT,
    SHIPPED_REPOSITORY,
    ensemble_config,
    ensemble_step,
    model_config,
    require_weights,
    write_model,
)
from kyc_tools.repo.config import load_config, model_kind, model_parameters
from kyc_tools.repo.graph.build import build_graph
from kyc_tools.repo.graph.cli import add_graph_parser, main
from kyc_tools.repo.graph.draw import CLIENT_ID, model_id, outputs_id, step_id, to_dot, to_mermaid
from kyc_tools.repo.graph.elements import ENSEMBLE, SEQUENCE, Graph
from kyc_tools.repo.graph.steps import declared_uses, glue_target

CONFIGS = {p.parent.name: load_config(p)
           for p in sorted(SHIPPED_REPOSITORY.glob("*/config.pbtxt"))}
ENSEMBLES = sorted(name for name, c in CONFIGS.items() if c.platform == "ensemble")
PYTHON_MODELS = sorted(name for name, c in CONFIGS.items() if model_kind(c).name == "python")
DOC = PROJECT_ROOT / "docs" / "model-graph.mmd"
REGENERATE = (".venv/bin/python -m kyc_tools.repo.graph model_repository"
              " --output docs/model-graph.mmd")

NODE_ID = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
MERMAID_NODE = re.compile(r'^\s*([A-Za-z]\w*)(\[\[|\[\(|\(\[|\{\{|\[|\()"[^"]*"'
                          r'(\]\]|\)\]|\]\)|\}\}|\]|\)):::\w+$')
MERMAID_EDGE = re.compile(r'^\s*([A-Za-z]\w*) (-->|==>|-\.->)(\|"[^"]*"\|)? ([A-Za-z]\w*)$')
DOT_NODE = re.compile(r'^\s*([A-Za-z]\w*) \[label="(?:[^"\\]|\\.)*".*\];$')
DOT_EDGE = re.compile(r"^\s*([A-Za-z]\w*) -> ([A-Za-z]\w*)( \[.*\])?;$")


@pytest.fixture(scope="module")
def graph() -> Graph:
    return build_graph(SHIPPED_REPOSITORY)


def mermaid_parts(text: str) -> tuple[set[str], list[tuple[str, str, str, str]]]:
    """(node ids, edges as (source, arrow, label, target)); fails on any line that is
    not a part of the flowchart this module writes."""
    lines = text.splitlines()
    assert lines[0] == "flowchart LR"
    nodes: set[str] = set()
    edges = []
    depth = 0
    for line in lines[1:]:
        if node := MERMAID_NODE.match(line):
            assert node.group(1) not in nodes, line
            nodes.add(node.group(1))
        elif edge := MERMAID_EDGE.match(line):
            label = (edge.group(3) or "||")[2:-2]
            edges.append((edge.group(1), edge.group(2), label, edge.group(4)))
        elif line.lstrip().startswith("subgraph "):
            depth += 1
        elif line.strip() == "end":
            depth -= 1
        else:
            assert re.match(r"^\s*(%% |classDef \w+ |direction LR$)", line), line
    assert depth == 0
    return nodes, edges


def dot_parts(text: str) -> tuple[set[str], list[tuple[str, str, str, str]]]:
    """(node ids, edges as (source, "->", label, target))."""
    lines = text.splitlines()
    assert lines[0] == "digraph model_graph {" and lines[-1] == "}"
    assert text.count("{") == text.count("}")
    nodes: set[str] = set()
    edges = []
    for line in lines[1:-1]:
        if edge := DOT_EDGE.match(line):
            label = re.search(r'label="((?:[^"\\]|\\.)*)"', edge.group(3) or "")
            edges.append((edge.group(1), "->", label.group(1) if label else "", edge.group(2)))
        elif node := DOT_NODE.match(line):
            assert node.group(1) not in nodes, line
            nodes.add(node.group(1))
    return nodes, edges


def expected_flows(config) -> set[tuple[int, int, str]]:
    """(producer, consumer, tensor) of an ensemble, straight from its config: 0 is the
    ensemble's inputs as a producer and its outputs as a consumer."""
    steps = list(config.ensemble_scheduling.step)
    inputs = {t.name for t in config.input}

    def producer(tensor: str) -> int:
        if tensor in inputs:
            return 0
        found = [i for i, s in enumerate(steps, 1) if tensor in s.output_map.values()]
        assert len(found) == 1, f"{tensor}: produced by steps {found}"
        return found[0]

    flows = {(producer(t), j, t) for j, s in enumerate(steps, 1) for t in s.input_map.values()}
    return flows | {(producer(t.name), 0, t.name) for t in config.output}


def flow_triples(graph: Graph, ensemble: str) -> set[tuple[int, int, str]]:
    return {(f.source, f.target, t) for f in graph.flows if f.ensemble == ensemble
            for t in f.tensors}


def calls(graph: Graph, caller: str | None = None) -> set[tuple[str, str, str, str]]:
    return {(c.caller, c.callee, c.kind, c.parameter) for c in graph.calls
            if caller is None or c.caller == caller}


# -- the shipped repository ------------------------------------------------------
def test_every_model_is_a_node_with_its_kind_runtime_and_batch_size(graph):
    assert [m.name for m in graph.models] == sorted(CONFIGS)
    mermaid, dot = to_mermaid(graph), to_dot(graph)
    mermaid_nodes, _ = mermaid_parts(mermaid)
    dot_nodes, _ = dot_parts(dot)
    for name, config in CONFIGS.items():
        model = graph.model(name)
        assert model.max_batch_size == config.max_batch_size
        runtime = config.backend or config.platform
        assert model.runtime.endswith(" " + runtime)
        if config.HasField("sequence_batching"):
            assert model.kind == SEQUENCE
        else:
            assert model.kind == model_kind(config).name
        node = model_id(name)
        assert node in mermaid_nodes and node in dot_nodes
        (line,) = [x for x in mermaid.splitlines() if x.strip().startswith(node + "(")
                   or x.strip().startswith(node + "[") or x.strip().startswith(node + "{")]
        assert f'"{name}<br/>' in line and runtime in line
        assert f"max_batch_size {config.max_batch_size}" in line
        assert line.endswith(f":::{model.kind}")


@pytest.mark.parametrize("ensemble", ENSEMBLES)
def test_ensemble_steps_are_those_of_its_config(graph, ensemble):
    config = CONFIGS[ensemble]
    assert graph.model(ensemble).kind == ENSEMBLE
    assert [(s.index, s.model, s.version) for s in graph.ensemble_steps(ensemble)] == [
        (i, s.model_name, s.model_version)
        for i, s in enumerate(config.ensemble_scheduling.step, 1)]


@pytest.mark.parametrize("ensemble", ENSEMBLES)
def test_ensemble_tensor_edges_are_those_of_its_config(graph, ensemble):
    config = CONFIGS[ensemble]
    assert flow_triples(graph, ensemble) == expected_flows(config)
    # the ensemble's inputs leave its node, its outputs arrive at its outputs node
    triples = flow_triples(graph, ensemble)
    assert {t for s, _, t in triples if s == 0} <= {t.name for t in config.input}
    assert {t for _, d, t in triples if d == 0} == {t.name for t in config.output}
    # one drawn edge per (producer, consumer), named by its tensors
    _, edges = mermaid_parts(to_mermaid(graph))
    drawn = {(s, d, label) for s, arrow, label, d in edges if arrow == "-->"}
    for flow in (f for f in graph.flows if f.ensemble == ensemble):
        source = step_id(ensemble, flow.source) if flow.source else model_id(ensemble)
        target = step_id(ensemble, flow.target) if flow.target else outputs_id(ensemble)
        assert (source, target, ", ".join(flow.tensors)) in drawn


def test_every_step_node_runs_its_model(graph):
    _, edges = mermaid_parts(to_mermaid(graph))
    runs = {(s, d) for s, arrow, label, d in edges if arrow == "-.->" and not label}
    assert runs == {(step_id(s.ensemble, s.index), model_id(s.model)) for s in graph.steps}


def test_bls_and_settings_edges_follow_the_model_parameters(graph):
    def p(model: str) -> dict[str, str]:
        return model_parameters(SHIPPED_REPOSITORY, model)

    live, face = p("liveness_sequence"), p(p("liveness_sequence")["face_model"])
    expected = {
        ("face_preprocess", p("face_preprocess")["detector_model"], BLS, "detector_model"),
        ("face_preprocess", p("face_preprocess")["limits_model"], SETTINGS, "limits_model"),
        ("ocr_preprocess", p("ocr_preprocess")["limits_model"], SETTINGS, "limits_model"),
        ("ocr_postprocess", p("ocr_postprocess")["rec_model"], BLS, "rec_model"),
        # the same step, its settings those of the model it names, the recogniser too
        ("ocr_fields", p("ocr_fields")["settings_model"], SETTINGS, "settings_model"),
        ("ocr_fields", p(p("ocr_fields")["settings_model"])["rec_model"], BLS,
         "settings_model.rec_model"),
        # the MRZ lines read by the recogniser made for them (issue 45)
        ("ocr_postprocess", p("ocr_postprocess")["mrz_model"], BLS, "mrz_model"),
        ("ocr_fields", p(p("ocr_fields")["settings_model"])["mrz_model"], BLS,
         "settings_model.mrz_model"),
        ("kyc_decision", p("kyc_decision")["antifraud_model"], BLS, "antifraud_model"),
        # it embeds the attested faces itself (kyc.decision.custody), by its threshold
        ("kyc_decision", p("kyc_decision")["embedding_model"], BLS, "embedding_model"),
        # it reads face_preprocess's settings and calls the detector they name itself
        ("liveness_sequence", live["face_model"], SETTINGS, "face_model"),
        ("liveness_sequence", face["detector_model"], BLS, "face_model.detector_model"),
        ("liveness_sequence", face["limits_model"], SETTINGS, "face_model.limits_model"),
        ("liveness_sequence", live["embedding_model"], BLS, "embedding_model"),
        ("liveness_sequence", live["landmark_model"], BLS, "landmark_model"),
    }
    if live["antispoof_model"]:  # empty: passive PAD not configured, no edge
        expected.add(("liveness_sequence", live["antispoof_model"], BLS, "antispoof_model"))
    assert calls(graph) == expected
    assert graph.unresolved == ()
    _, edges = mermaid_parts(to_mermaid(graph))
    for caller, callee, kind, parameter in expected:
        arrow = "==>" if kind == BLS else "-.->"
        assert (model_id(caller), arrow, f"{kind} {parameter}", model_id(callee)) in edges
    _, dot_edges = dot_parts(to_dot(graph))
    assert {(model_id(c), "->", f"{k} {p}", model_id(d))
            for c, d, k, p in expected} <= set(dot_edges)


def test_every_model_parameter_of_a_python_model_is_declared_by_its_step():
    """A new ``*_model`` parameter, or a step class renamed, must be told to the step's
    CONTRACT (kyc.pipeline.contract)."""
    for name in PYTHON_MODELS:
        config = CONFIGS[name]
        target = glue_target(SHIPPED_REPOSITORY / name, config)
        keys = {k for k in config.parameters if k.endswith("_model")}
        assert target is not None, f"{name}: no triton_model(...) in its glue file"
        uses = declared_uses(target)
        assert keys <= set(uses), f"{name}: {keys - set(uses)} undeclared by {target}"


def test_a_python_models_step_is_what_its_glue_file_hands_triton_model_found_by_import(
        tmp_path):
    """One rule for the graph and the local runtime (kyc.pipeline.triton.served_step); a
    factory that no "module:Class" names, or a glue file that fails to import, names no
    step to draw."""
    for name in PYTHON_MODELS:
        target = served_step(SHIPPED_REPOSITORY / name / "1", CONFIGS[name])
        assert glue_target(SHIPPED_REPOSITORY / name, CONFIGS[name]) == target
        assert isinstance(target, str) and target.startswith("kyc."), name
    config = 'name: "{}"\nbackend: "python"\nmax_batch_size: 2\n'
    write_model(tmp_path, "factory", config.format("factory"),
                "from kyc.pipeline.triton import triton_model\n\n"
                "TritonPythonModel = triton_model(lambda context: None)\n")
    write_model(tmp_path, "broken", config.format("broken"), "import no_such_module\n")
    for name in ("factory", "broken"):
        assert glue_target(tmp_path / name, load_config(tmp_path / name / "config.pbtxt")) is None
    assert callable(served_step(tmp_path / "factory" / "1",
                                load_config(tmp_path / "factory" / "config.pbtxt")))


def test_the_calls_drawn_are_those_the_steps_make_when_built(graph):
    """Each shipped Python step is built with a context that records the models it
    makes callees of (BLS) and whose parameters it reads (settings)."""
    require_weights()
    pytest.importorskip("kyc.pipeline.step")
    from kyc.pipeline.modelconfig import Repository, config_dict
    from kyc.pipeline.step import StepContext
    from kyc.pipeline.triton import resolve

    class RecordingRepository(Repository):
        def __init__(self, root: Path) -> None:
            super().__init__(root)
            self.read: set[str] = set()

        def parameters(self, model: str) -> dict[str, str]:
            self.read.add(model)
            return super().parameters(model)

    class RecordingContext(StepContext):
        called: set[str]

        def callee(self, model, outputs=None):
            self.called.add(model)
            return super().callee(model, outputs)

    environ = {"KYC_TOKEN_KEY": base64.b64encode(bytes(32)).decode()}
    for name in PYTHON_MODELS:
        repository = RecordingRepository(SHIPPED_REPOSITORY)
        context = RecordingContext(name, "1", config_dict(CONFIGS[name]), repository,
                                   infer=None, in_server=False, environ=environ)
        context.called = set()
        resolve(glue_target(SHIPPED_REPOSITORY / name, CONFIGS[name]))(context)
        drawn = calls(graph, name)
        bls = {callee for _, callee, kind, _ in drawn if kind == BLS}
        settings = {callee for _, callee, kind, _ in drawn if kind == SETTINGS}
        assert bls == context.called, name
        assert settings <= repository.read <= settings | bls, name


def test_clients_call_the_sequence_model_and_the_models_no_one_else_calls(graph):
    stepped = {s.model_name for c in CONFIGS.values() for s in c.ensemble_scheduling.step}
    sequence = {name for name, c in CONFIGS.items() if c.HasField("sequence_batching")}
    bls = {c.callee for c in graph.calls if c.kind == BLS}
    assert set(graph.clients) == sequence | (set(CONFIGS) - stepped - bls)
    assert "liveness_sequence" in graph.clients and "kyc_ensemble" in graph.clients
    _, edges = mermaid_parts(to_mermaid(graph))
    controls = {c.name for c in CONFIGS["liveness_sequence"].sequence_batching.control_input}
    (label,) = [lbl for s, _, lbl, d in edges
                if s == CLIENT_ID and d == model_id("liveness_sequence")]
    assert label.startswith("sequence START ... END") and {"START", "END"} <= controls
    assert {d for s, _, _, d in edges if s == CLIENT_ID} == {model_id(m) for m in graph.clients}


def test_every_edge_joins_drawn_nodes_and_ids_are_safe(graph):
    for text, parts in ((to_mermaid(graph), mermaid_parts), (to_dot(graph), dot_parts)):
        nodes, edges = parts(text)
        assert all(NODE_ID.match(n) for n in nodes)
        for edge in edges:
            assert edge[0] in nodes and edge[-1] in nodes, edge


def test_the_text_is_the_same_every_time(graph):
    again = build_graph(SHIPPED_REPOSITORY)
    assert again == graph
    assert to_mermaid(again) == to_mermaid(graph) and to_dot(again) == to_dot(graph)


def test_docs_model_graph_is_up_to_date(graph):
    assert DOC.is_file(), f"{DOC} is missing: run `{REGENERATE}`"
    assert DOC.read_text(encoding="utf-8") == to_mermaid(graph), (
        f"{DOC.relative_to(PROJECT_ROOT)} is out of date with model_repository/: run "
        f"`{REGENERATE}` (or `kyc repo graph --output docs/model-graph.mmd`)")
    architecture = (PROJECT_ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    embedded = architecture.split("<!-- model-graph:begin -->\n```mermaid\n")[1]
    embedded = embedded.split("```\n<!-- model-graph:end -->")[0]
    assert embedded == to_mermaid(graph), (
        "docs/architecture.md's picture is not docs/model-graph.mmd: copy the file between "
        "its model-graph markers")


# -- edge cases, on a repository of our own ----------------------------------------
def param(key: str, value: str) -> str:
    return f'parameters {{ key: "{key}" value: {{ string_value: "{value}" }} }}\n'


@pytest.fixture
def odd_repository(tmp_path: Path) -> Path:
    root = tmp_path / "odd"
    write_model(root, "det", model_config(
        "det", platform="onnxruntime_onnx", max_batch_size=4,
        inputs={"IMAGES": ("UINT8", [-1, -1, 3])}, outputs={"LOC": ("FP32", [-1, 4])}))
    # no glue file: every *_model parameter but face_model/limits_model is a BLS call
    write_model(root, "pre", model_config(
        "pre", backend="python", max_batch_size=2, inputs={"IMAGE": ("STRING", [1])},
        outputs={"FACE": ("UINT8", [112, 112, 3])}, more=param("detector_model", "det")
        + param("limits_model", "gone") + param("rec_model", "nowhere")))
    # the liveness step: it reads pre's settings and calls the detector they name
    write_model(root, "live", model_config(
        "live", backend="python", inputs={"FRAME": ("STRING", [1])},
        outputs={"STATUS": ("STRING", [1])}, more="""
        sequence_batching {
          control_input [
            { name: "BEGIN" control [ { kind: CONTROL_SEQUENCE_START
                                        fp32_false_true: [ 0, 1 ] } ] },
            { name: "FINISH" control [ { kind: CONTROL_SEQUENCE_END
                                         fp32_false_true: [ 0, 1 ] } ] }
          ]
        }
        """ + param("face_model", "pre") + param("embedding_model", "det")
        + param("antispoof_model", "")),
        model_py='from kyc.pipeline.triton import triton_model\n\n'
             'TritonPythonModel = triton_model("kyc.liveness.step:LivenessStep")\n')
    write_model(root, "ens", ensemble_config(
        "ens", max_batch_size=2, inputs={"IN": ("STRING", [1])},
        outputs={"OUT": ("UINT8", [112, 112, 3])}, steps=[
            ensemble_step("pre", {"IMAGE": "IN"}, {"FACE": "face"}),
            ensemble_step("absent", {"X": "face", "Y": "IN"}, {"Z": "unused"}, version=3),
            ensemble_step("pre", {"IMAGE": "face"}, {"FACE": "OUT"})]))
    for name in ("odd-name", "odd_name"):
        write_model(root, name, f"""
            name: "{name}"
            platform: "onnxruntime_onnx"
            max_batch_size: 0
            """)
    return root


def test_an_empty_model_parameter_is_not_configured_and_draws_nothing(odd_repository):
    graph = build_graph(odd_repository)
    assert not [c for c in graph.calls if c.parameter == "antispoof_model"]
    assert not [u for u in graph.unresolved if u.where == "antispoof_model"]
    assert "antispoof" not in to_mermaid(graph) and "antispoof" not in to_dot(graph)


def test_a_parameter_naming_a_missing_model_draws_no_edge_and_is_told(odd_repository, capsys):
    graph = build_graph(odd_repository)
    assert [(u.model, u.where, u.value) for u in graph.unresolved] == [
        ("ens", "step 2", "absent"),
        ("live", "face_model.limits_model", "gone"),
        ("pre", "limits_model", "gone"),
        ("pre", "rec_model", "nowhere"),
    ]
    callees = {c.callee for c in graph.calls}
    assert not callees & {"gone", "nowhere", "absent"}
    mermaid, dot = to_mermaid(graph), to_dot(graph)
    assert "  %% unresolved: pre rec_model names 'nowhere', no model of odd" in mermaid
    assert "  // unresolved: pre rec_model names 'nowhere', no model of odd" in dot
    # the step of the missing model is drawn, with its tensors, but runs nothing
    _, edges = mermaid_parts(mermaid)
    assert (step_id("ens", 1), "-->", "face", step_id("ens", 2)) in edges
    assert (model_id("ens"), "-->", "IN", step_id("ens", 2)) in edges
    assert [e for e in edges if e[0] == step_id("ens", 2)] == []
    assert '"step 2: absent v3"' in mermaid
    assert main([str(odd_repository)]) == 0
    err = capsys.readouterr().err
    assert "warning: pre rec_model names 'nowhere', no model of" in err
    assert "warning: ens step 2 names 'absent'" in err


def test_calls_follow_the_step_class_of_the_glue_file_and_defaults_without_one(odd_repository):
    graph = build_graph(odd_repository)
    assert glue_target(odd_repository / "live", load_config(
        odd_repository / "live" / "config.pbtxt")) == "kyc.liveness.step:LivenessStep"
    assert calls(graph) == {
        ("pre", "det", BLS, "detector_model"),
        ("live", "pre", SETTINGS, "face_model"),
        ("live", "det", BLS, "face_model.detector_model"),
        ("live", "det", BLS, "embedding_model"),
    }
    # clients: the sequence model (its own controls), and what no step or BLS reaches
    assert graph.clients == ("ens", "live", "odd-name", "odd_name")
    assert graph.model("live").sequence_controls == ("BEGIN", "FINISH")
    assert '-->|"sequence BEGIN ... FINISH: FRAME"| m_live' in to_mermaid(graph)


def test_names_that_are_not_ids_become_distinct_safe_ids(odd_repository):
    graph = build_graph(odd_repository)
    ids = {model_id("odd-name"), model_id("odd_name")}
    assert len(ids) == 2 and all(NODE_ID.match(i) for i in ids)
    for text, parts in ((to_mermaid(graph), mermaid_parts), (to_dot(graph), dot_parts)):
        nodes, edges = parts(text)
        assert ids <= nodes
        assert all(e[0] in nodes and e[-1] in nodes for e in edges)


def test_a_quote_in_a_tensor_name_does_not_break_either_text(tmp_path):
    write_model(tmp_path, "q", """
        name: "q"
        platform: "ensemble"
        max_batch_size: 1
        input [ { name: "A\\"B<c>" data_type: TYPE_STRING dims: [ 1 ] } ]
        output [ { name: "A\\"B<c>" data_type: TYPE_STRING dims: [ 1 ] } ]
        ensemble_scheduling { step [ ] }
        """)
    graph = build_graph(tmp_path)
    _, edges = mermaid_parts(to_mermaid(graph))
    assert (model_id("q"), "-->", "A#quot;B#lt;c#gt;", outputs_id("q")) in edges
    _, dot_edges = dot_parts(to_dot(graph))
    assert (model_id("q"), "->", 'A\\"B<c>', outputs_id("q")) in dot_edges


# -- the command ------------------------------------------------------------------
def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="kyc repo")
    add_graph_parser(top.add_subparsers(dest="repo_command", required=True))
    return top


def test_command_defaults_to_mermaid_of_model_repository_on_stdout():
    args = parser().parse_args(["graph"])
    assert (args.repository, args.format, args.output) == (Path("model_repository"),
                                                           "mermaid", None)


def test_command_writes_mermaid_to_stdout_and_dot_to_a_file(graph, tmp_path, capsys):
    args = parser().parse_args(["graph", str(SHIPPED_REPOSITORY)])
    assert args.func(args) == 0
    assert capsys.readouterr().out == to_mermaid(graph)
    out = tmp_path / "graph.dot"
    args = parser().parse_args(["graph", str(SHIPPED_REPOSITORY), "--format", "dot",
                                "--output", str(out)])
    assert args.func(args) == 0
    assert out.read_text() == to_dot(graph)
    assert capsys.readouterr().out == ""


def test_command_fails_cleanly_on_no_repository_or_a_broken_config(tmp_path, capsys):
    assert main([str(tmp_path / "none")]) == 1
    assert "kyc repo graph: " in capsys.readouterr().err
    write_model(tmp_path, "bad", 'name: "bad" max_batch_size: "eight"\n')
    assert main([str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "kyc repo graph: " in err and "bad/config.pbtxt" in err


def test_kyc_repo_graph_is_a_command_of_the_cli(capsys):
    from kyc_tools.cli import main

    assert main(["repo", "graph", str(SHIPPED_REPOSITORY), "--format", "dot"]) == 0
    assert capsys.readouterr().out.startswith("digraph model_graph {")
