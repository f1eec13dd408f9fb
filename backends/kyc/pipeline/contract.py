"""What a step declares about itself, once: its :class:`Contract`.

Every step class that a Python model's glue file serves (``triton_model("kyc.X.step:Y")``)
has a class attribute ``CONTRACT``: the tensors it reads and writes, its settings (the
frozen dataclass its config's ``parameters`` are read into), how it uses each model its
``*_model`` settings name (a BLS call, or a read of that model's settings) and the step
of the latency budgets (:mod:`kyc.budgets`) its work counts to.

Nothing else types the pipeline's shape again: the repository tools
(``kyc_tools.repo.graph``) derive from the configs plus these declarations the graph,
the models each entry runs through (the bench's and the evaluation's lists), every
model's budget step, and they check each step against the configs that serve it.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field

BLS = "BLS"  # the step infers on the model (StepContext.callee: a BLS call when served)
SETTINGS = "settings"  # it reads that model's parameters (StepContext.model_settings)
MODEL_SUFFIX = "_model"


@dataclass(frozen=True)
class Use:
    """How a step uses the model one of its ``*_model`` settings names.

    ``acts_as``: the step also makes, itself, the calls the step class ``acts_as``
    (``"module:Class"``) makes with the *named* model's parameters (liveness_sequence
    reads face_preprocess's settings and runs the face path on them). ``budget``: the
    budget step the called model's work counts to, when not the caller's own (the
    decision embeds the faces: face matching's work).
    """

    kind: str
    acts_as: str | None = None
    budget: str | None = None


@dataclass(frozen=True)
class Contract:
    """A step's declaration (see the module's doc)."""

    settings: type  # a frozen dataclass; its ``*_model`` fields are the uses below
    budget: str  # its step in kyc.budgets.BUDGETS_MS
    inputs: tuple[str, ...]  # required in every config it serves
    outputs: tuple[str, ...]  # exactly the outputs of every config it serves
    optional_inputs: frozenset[str] = frozenset()  # a config may declare these, optional
    uses: Mapping[str, Use] = field(default_factory=dict)

    def model_settings(self) -> tuple[str, ...]:
        """The settings' fields that name a model (``*_model``), in declaration order."""
        return tuple(f.name for f in dataclasses.fields(self.settings)
                     if f.name.endswith(MODEL_SUFFIX))


def contract_of(target: str) -> Contract | None:
    """The ``CONTRACT`` of the step class ``"module:Class"`` (None: it declares none)."""
    module, _, name = target.partition(":")
    cls = getattr(importlib.import_module(module), name)
    contract = getattr(cls, "CONTRACT", None)
    return contract if isinstance(contract, Contract) else None


def contract_problems(contract: Contract) -> list[str]:
    """What is wrong in a declaration by itself: a ``*_model`` setting with no use, or a
    use of no setting (the configs are checked against it by kyc_tools.repo.graph)."""
    named = set(contract.model_settings())
    problems = [f"setting {n} names a model but has no declared use"
                for n in sorted(named - set(contract.uses))]
    problems += [f"use {n} is no *_model setting" for n in sorted(set(contract.uses) - named)]
    return problems
