"""Queue settings of the shipped configs against the latency budgets (:mod:`kyc.budgets`):
the queue policy the budgets' rule gives a model, written into its config through the
``ModelConfig`` schema, and what a config says now."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kyc.budgets import StepMap
from kyc_tools.repo.config import load_config
from kyc_tools.repo.config_edit import edit_config


@dataclass(frozen=True)
class QueuePolicy:
    """A model's ``dynamic_batching.default_queue_policy`` as configured."""

    timeout_action: str  # "REJECT" or "DELAY"
    timeout_us: int  # 0: no timeout
    max_queue_size: int  # 0: unbounded
    allow_timeout_override: bool


def configured_queue_policy(repository: Path, model: str) -> QueuePolicy | None:
    """The model's default queue policy (None: no dynamic batcher or no policy)."""
    config = load_config(repository / model / "config.pbtxt")
    if not (config.HasField("dynamic_batching")
            and config.dynamic_batching.HasField("default_queue_policy")):
        return None
    policy = config.dynamic_batching.default_queue_policy
    action = type(policy).TimeoutAction.Name(policy.timeout_action)
    return QueuePolicy(action, int(policy.default_timeout_microseconds),
                       int(policy.max_queue_size), bool(policy.allow_timeout_override))


MAX_QUEUE_SIZE = 64  # hard bound besides the timeout: 8 full batches


def with_queue_policy(config_text: str, model: str, steps: StepMap) -> str:
    """``config_text`` with the rule's queue policy in its ``dynamic_batching`` block
    (``steps``: the repository's derived budget steps, kyc_tools.repo.graph.derive.step_map;
    ``ValueError`` if it has none or already has a policy). Edited through the
    ``ModelConfig`` schema, comments kept (:mod:`kyc_tools.repo.config_edit`)."""
    def change(config) -> None:
        if not config.HasField("dynamic_batching"):
            raise ValueError(f"{model}: no dynamic_batching block")
        if config.dynamic_batching.HasField("default_queue_policy"):
            raise ValueError(f"{model}: already has a default_queue_policy")
        timeout = steps.queue_timeout_us(model)
        if timeout is None:
            raise ValueError(f"{model}: no dynamically batched step, no queue policy")
        policy = config.dynamic_batching.default_queue_policy
        policy.timeout_action = policy.REJECT
        policy.default_timeout_microseconds = timeout
        policy.allow_timeout_override = False
        policy.max_queue_size = MAX_QUEUE_SIZE

    # REJECT and false are proto3 defaults, which the text format leaves out: written
    # anyway, so that the file says what it does
    explicit = [f"dynamic_batching.default_queue_policy.{name}"
                for name in ("timeout_action", "allow_timeout_override")]
    return edit_config(config_text, change, explicit=explicit)


def configured_queue_delay_us(repository: Path, model: str) -> int | None:
    """``max_queue_delay_microseconds`` of the model's dynamic or sequence batcher."""
    config = load_config(repository / model / "config.pbtxt")
    if config.HasField("dynamic_batching"):
        return int(config.dynamic_batching.max_queue_delay_microseconds)
    if config.HasField("sequence_batching") and config.sequence_batching.HasField("oldest"):
        return int(config.sequence_batching.oldest.max_queue_delay_microseconds)
    return None
