"""Latency budgets per step, as the product design sets them, and what they bound.

The product's end-to-end SLA is 8 s; within it each step has a budget. A model's
``max_queue_delay_microseconds`` (how long its batcher may hold a request to fill a
batch) may use at most ``QUEUE_SHARE`` of its step's budget. The shipped delays
are far below that cap: on a CPU batching saves almost no compute (``kyc bench``
measures the ceiling), so waiting for a batch would add latency and buy nothing;
the cap is what a GPU deployment may raise them to. ``kyc bench`` also reports
each model's measured queue time against its cap.

Overload: a dynamically batched model can shed instead of queueing without bound,
with ``dynamic_batching.default_queue_policy { timeout_action: REJECT ... }``. One
rule gives its timeout (:meth:`StepMap.queue_timeout_us`, rendered by
:func:`kyc_tools.repo.queues.with_queue_policy`):

    queue timeout = QUEUE_SHARE x step budget / number of the step's batched models

so a step's queue allowance (30% of its budget) is split evenly over the models a
request passes through in that step, the sum along the path never exceeds the
allowance, and 70% of the budget is left for compute. Why a share and not "budget
minus measured compute": on the 2-core CPU the OCR step's compute alone (about 1 s
a page) already fills its 1000 ms budget, so that rule would leave no queue at all;
on a GPU the compute is a few ms and the share is what queueing may use. A request
refused this way gets gRPC UNAVAILABLE ("Request timeout expired", or "Exceeds
maximum queue size" past ``max_queue_size``), which the client SDK retries.

The SHIPPED configs do not carry the policy yet (measured, docs/reliability.md,
"Queue policies (not shipped)"): in Triton 2.51 any queue policy disables the batcher's
prefetching, and its wait for a free instance then loses wake-ups (core
``DynamicBatchScheduler::WaitForPayloadSlotAvailable`` waits on ``cv_`` under a
private mutex): about 1 idle request in 13 stalls 500 ms and, with a timeout under
500 ms, is rejected; and a burst of 16 requests (two CPU batches) has its second
batch rejected. The overload test applies the policy to its own copy. The sequence
batcher (``liveness_sequence``) has no queue policy in Triton 2.51.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

SLA_MS = 8000.0
BUDGETS_MS: Mapping[str, float] = {
    "liveness": 500.0,  # one liveness frame
    "intake": 100.0,  # kyc_ensemble's check of both images, before anything else
    "face_match": 300.0,  # face path of kyc_ensemble: detect, align, embed
    "ocr": 1000.0,  # document reading
    "antifraud": 200.0,  # fraud score and decision
}
QUEUE_SHARE = 0.3
# Admission control (kyc.intake.admission): the mean latency of admitted requests is
# held at this share of their entry's budget, which leaves their tail inside it. At 0.5
# the slowest of 16-20 customers admitted at 3x capacity took 5.6-7.8 s of the 8 s on a
# quiet 2-core VM and 9.3 s with another process on its cores (the limit moves by one
# customer a round trip around a small limit): 0.4 leaves that margin.
ADMISSION_TARGET_SHARE = 0.4
# The budget of each entry under admission control. A document read alone
# (document_ocr) has the product's SLA too: held to the OCR step's 1 s, its target
# (0.5 s) sat on a 2-core CPU's unloaded latency (0.3-0.4 s a page), and a burst of 8
# documents cut the limit to its floor and shed valid reads of an idle-looking server.
ADMISSION_BUDGET_MS: Mapping[str, float] = {
    "kyc_ensemble": SLA_MS,
    "document_ocr": SLA_MS,
}

@dataclass(frozen=True)
class StepMap:
    """Each model's budget step, and the models under the sequence batcher (which has
    no queue policy in Triton 2.51). Never typed by hand: derived from a repository's
    configs and its steps' declarations by ``kyc_tools.repo.graph.derive.step_map`` (a Python
    model's step declares its budget; a model it runs counts to the caller's)."""

    step_of: Mapping[str, str]  # model -> its step in BUDGETS_MS
    sequence: frozenset[str] = frozenset()

    def queue_cap_us(self, model: str) -> float | None:
        """The most a model may hold a request to batch, in microseconds (None: no step)."""
        step = self.step_of.get(model)
        return None if step is None else BUDGETS_MS[step] * QUEUE_SHARE * 1000.0

    def queue_timeout_us(self, model: str) -> int | None:
        """The queue timeout the rule above gives ``model``, in microseconds (None: the
        model has no step, or is not dynamically batched)."""
        step = self.step_of.get(model)
        if step is None or model in self.sequence:
            return None
        batched = [m for m, s in self.step_of.items() if s == step and m not in self.sequence]
        return int(BUDGETS_MS[step] * QUEUE_SHARE * 1000.0 / len(batched))


def queue_against_budget(model_stats: Mapping[str, Mapping[str, float]], steps: StepMap
                         ) -> dict[str, dict]:
    """Each budgeted model's measured mean queue time (``model_stats`` of one bench
    level) against its cap: {"queue_ms", "cap_ms", "within"}."""
    out = {}
    for model, stats in model_stats.items():
        cap = steps.queue_cap_us(model)
        if cap is not None and stats.get("queue_us") is not None:  # None: no request
            out[model] = {"queue_ms": round(stats["queue_us"] / 1000.0, 1),
                          "cap_ms": round(cap / 1000.0, 1),
                          "within": bool(stats["queue_us"] <= cap)}
    return out
