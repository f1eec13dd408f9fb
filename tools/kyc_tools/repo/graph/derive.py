"""What the graph derives for the bench, the evaluation and the latency budgets: the
models a request runs through, the models whose statistics make up a request, and each
model's step of the budgets."""

from __future__ import annotations

from collections.abc import Sequence

from kyc.budgets import BUDGETS_MS, StepMap
from kyc.pipeline.contract import BLS
from kyc_tools.repo.graph.elements import SEQUENCE, Graph
from kyc_tools.repo.graph.steps import step_contract


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
        contract = step_contract(model.step)
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
