"""Which step a Python model of a repository serves, and what that step declares.

The step is the one its glue file names, found by the one rule that the local runtime
follows too (:func:`kyc.pipeline.triton.served_step`); its use of the models its
``*_model`` parameters name is its own declaration, its CONTRACT
(:mod:`kyc.pipeline.contract`). A model graph is drawn for any repository: a glue file
that does not import, or a step that declares nothing, leaves the step unknown.
"""

from __future__ import annotations

from pathlib import Path

from kyc.pipeline.contract import Contract, Use, contract_of
from kyc.pipeline.modelconfig import served_versions, version_dirs
from kyc.pipeline.triton import served_step
from kyc_tools.repo.config import ModelConfig

# A Python model whose step declares none: each of its *_model parameters is a BLS call.
NO_CONTRACT: dict[str, Use] = {}


def glue_target(model_dir: Path, config: ModelConfig) -> str | None:
    """``kyc.face.step:FacePreprocessStep``: the step a Python model's glue file
    serves (the newest served version's, :func:`kyc.pipeline.triton.served_step`), or
    None: no version served, no glue file, one that fails to import, or a step factory
    that no ``"module:Class"`` names."""
    served = served_versions(config, version_dirs(model_dir)) if model_dir.is_dir() else []
    if not served:
        return None
    try:
        target = served_step(served[-1], config)
    except Exception:  # any repository's glue file: one that cannot be imported names none
        return None
    return target if isinstance(target, str) else None


def step_contract(target: str | None) -> Contract | None:
    """The CONTRACT of a glue file's step class; None when there is no target, or it
    names no importable class (a model graph is drawn for any repository)."""
    if not target:
        return None
    try:
        return contract_of(target)
    except (ImportError, AttributeError, ValueError):
        return None


def declared_uses(target: str | None) -> dict[str, Use]:
    """How the step class ``target`` ("module:Class") uses each ``*_model`` parameter,
    from its CONTRACT (empty: no target, or a step that declares none)."""
    contract = step_contract(target)
    return dict(contract.uses) if contract is not None else NO_CONTRACT
