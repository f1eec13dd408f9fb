"""The model graph of a repository, drawn from its configs (``kyc repo graph``).

- :mod:`.elements`: what a graph is made of (models, ensemble steps, flows, calls);
- :mod:`.steps`: which step a Python model serves and what that step declares;
- :mod:`.build`: the graph built from a repository's ``*/config.pbtxt``;
- :mod:`.derive`: what the bench, the evaluation and the latency budgets derive from it;
- :mod:`.contracts`: the Python models' configs held against their steps' CONTRACTs;
- :mod:`.draw`: the graph as Mermaid or DOT text;
- :mod:`.cli`: ``kyc repo graph`` and ``python -m kyc_tools.repo.graph``.

The names below are those that users of the former single module import.
"""

from kyc.pipeline.contract import BLS, SETTINGS
from kyc_tools.repo.graph.build import build_graph
from kyc_tools.repo.graph.cli import add_graph_parser, cmd_graph, main
from kyc_tools.repo.graph.contracts import contract_mismatches
from kyc_tools.repo.graph.derive import entry_models, runs_through, step_map
from kyc_tools.repo.graph.draw import CLIENT_ID, model_id, outputs_id, step_id, to_dot, to_mermaid
from kyc_tools.repo.graph.elements import ENSEMBLE, SEQUENCE, Graph
from kyc_tools.repo.graph.steps import declared_uses, glue_target

__all__ = ["BLS", "CLIENT_ID", "ENSEMBLE", "SEQUENCE", "SETTINGS", "Graph", "add_graph_parser",
           "build_graph", "cmd_graph", "contract_mismatches", "declared_uses", "entry_models",
           "glue_target", "main", "model_id", "outputs_id", "runs_through", "step_id",
           "step_map", "to_dot", "to_mermaid"]
