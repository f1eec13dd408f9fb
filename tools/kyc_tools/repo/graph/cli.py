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
import sys
from collections.abc import Sequence
from pathlib import Path

from kyc_tools.repo.config import ConfigError
from kyc_tools.repo.graph.build import build_graph
from kyc_tools.repo.graph.draw import RENDERERS

DEFAULT_REPOSITORY = Path("model_repository")
FORMATS = ("mermaid", "dot")


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
