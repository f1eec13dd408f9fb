"""The Python models' configs held against their steps' CONTRACTs (``kyc repo check``)."""

from __future__ import annotations

from pathlib import Path

from kyc.pipeline.contract import Contract, contract_problems
from kyc_tools.repo.check import CONFIG
from kyc_tools.repo.config import ModelConfig
from kyc_tools.repo.graph.build import model_references, read_configs
from kyc_tools.repo.graph.elements import Graph
from kyc_tools.repo.graph.steps import step_contract


def contract_mismatches(graph: Graph, repository: Path) -> list[str]:
    """Where a Python model's config and its step's CONTRACT disagree: tensors, the
    ``*_model`` parameters, or the declaration itself, one ``MODEL/config.pbtxt: ...``
    line each (empty: they agree). ``kyc repo check`` prints them; the watcher's check of
    a dropped version does not run it (a version folder brings no config, and it would
    import every step into ``kyc serve``'s process)."""
    configs = read_configs(repository)
    problems = []
    for model in graph.models:
        contract = step_contract(model.step)
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
