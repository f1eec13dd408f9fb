"""Overload: at about 3x its measured capacity, face_preprocess sheds with UNAVAILABLE.

The server runs a copy of the shipped repository with kyc.budgets' queue policy
(REJECT at the rule's timeout) applied to face_preprocess, the entry of the face
path; its BLS callee face_detector gets none (a rejection inside a BLS call would
reach the client as INTERNAL, and its queue is bounded by its callers' instances).
The shipped configs do not carry the policy yet: see kyc.budgets.

face_preprocess (decode, detect through face_detector, align) is the first step of the
face path of kyc_ensemble and a public model; on real photos it is quick enough that
a 3x overload is reached in seconds on 2 cores. Capacity is measured here (a short
closed loop), so the test holds on a busy machine and on a fresh one.

What bounds an accepted request: its queue policy (kyc.budgets.queue_timeout_us)
admits it only if it waited at most the timeout when the batcher next looked, then it
runs in one batch. So latency <= queue timeout + the compute of a full batch. A full
batch's compute is measured here while idle, and again under the load, from Triton's
own counters (compute time over executions): under load it is slower (the load
generator shares the 2 cores: 148 ms idle and over 250 loaded on a 2-core EPYC), and
the bound takes the larger, with a margin for a batch slower than the mean.
"""

from __future__ import annotations

import itertools
import math
import statistics
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from kyc.budgets import BUDGETS_MS
from kyc_client.sdk import KycClient, RetryPolicy
from kyc_testing import SHIPPED_REPOSITORY, metric_sum, scrape, shipped_server
from kyc_tools.assets.fetch import fetch_test_photos
from kyc_tools.repo.graph import build_graph, step_map
from kyc_tools.repo.queues import configured_queue_policy, with_queue_policy
from loadgen import OK, closed_loop_rate, run_open_loop, summarize, triton_starter

pytestmark = pytest.mark.integration

MODEL = "face_preprocess"
SHED_MESSAGES = ("Request timeout expired", "Exceeds maximum queue size")
OVERLOAD = 3.0
# An accepted request waited at most the queue timeout when its batch was formed,
# then ran in one batch of at most 8 (measured idle here); under load the batch runs
# slower, sharing the 2 cores with the load generator: BATCH_MARGIN, and RPC_SLACK_MS
# for gRPC and the client's callback thread.
BATCH_MARGIN = 1.5
RPC_SLACK_MS = 50.0
LOAD_S = 20.0
STEPS = step_map(build_graph(SHIPPED_REPOSITORY))  # derived budget steps (kyc.budgets)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with shipped_server(tmp_path_factory.mktemp("overload"),
                        {MODEL: lambda text: with_queue_policy(text, MODEL, STEPS)}) as (_, server):
        yield server


@pytest.fixture(scope="module")
def client(server):
    c = grpcclient.InferenceServerClient(server.options.grpc_url)
    yield c
    c.close()


@pytest.fixture(scope="module")
def photos() -> list[bytes]:
    return [p.read_bytes() for p in fetch_test_photos().values() if p.suffix == ".jpg"]


def image_input(image: bytes) -> list:
    tensor = grpcclient.InferInput("IMAGE", [1, 1], "BYTES")
    tensor.set_data_from_numpy(np.array([[image]], dtype=np.object_))
    return [tensor]


def one_call_ms(sdk: KycClient, image: bytes) -> float:
    """One request through the SDK, which retries a shed one (Triton 2.51 stalls an
    idle request now and then once a queue policy is set: kyc.budgets)."""
    t0 = time.perf_counter()
    sdk.find_face(image)
    return (time.perf_counter() - t0) * 1000.0


def full_batch_ms(client, images: list[bytes]) -> float:
    """Wall time of one request carrying a full batch of 8 images (8 requests sent at
    once would not make one: those that wait for the busy instance are shed)."""
    tensor = grpcclient.InferInput("IMAGE", [len(images), 1], "BYTES")
    tensor.set_data_from_numpy(np.array([[i] for i in images], dtype=np.object_))
    t0 = time.perf_counter()
    try:
        client.infer(MODEL, [tensor], client_timeout=60)
    except InferenceServerException:  # shed: an idle request stalled (kyc.budgets)
        return math.inf
    return (time.perf_counter() - t0) * 1000.0


def batch_counters(server) -> tuple[float, float]:
    """face_preprocess's compute time (us) and executions (batches) so far."""
    text = scrape(server)
    return (metric_sum(text, "nv_inference_compute_infer_duration_us", model=MODEL),
            metric_sum(text, "nv_inference_exec_count", model=MODEL))


def per_batch_ms(before: tuple[float, float], after: tuple[float, float]) -> float:
    """The mean compute of one execution between two readings of batch_counters."""
    executions = after[1] - before[1]
    return (after[0] - before[0]) / 1000.0 / executions if executions else 0.0


def test_beyond_capacity_requests_are_shed_with_unavailable_and_accepted_ones_stay_in_budget(
        server, client, photos):
    cycle = itertools.cycle(photos)
    # a stalled idle request is shed after the batcher's 500 ms wait; a retry sooner than
    # that meets the same wait (CI once shed all 4 quick tries of a warm-up call)
    sdk = KycClient(server.options.grpc_url,
                    retry=RetryPolicy(attempts=6, base_delay_s=0.6, max_delay_s=2.0))
    for image in photos:  # warm every code path once
        one_call_ms(sdk, image)
    idle_ms = statistics.median(one_call_ms(sdk, next(cycle)) for _ in range(7))
    batch_ms = min(full_batch_ms(client, [next(cycle) for _ in range(8)]) for _ in range(3))
    assert math.isfinite(batch_ms), "a batch of 8 on an idle server was shed every time"
    capacity = closed_loop_rate(lambda: client.infer(MODEL, image_input(next(cycle)),
                                                     client_timeout=60), 4, 5.0)

    rate = OVERLOAD * capacity
    load = grpcclient.InferenceServerClient(server.options.grpc_url)
    before = batch_counters(server)
    try:
        outcomes = run_open_loop(triton_starter(load, MODEL, lambda: image_input(next(cycle))),
                                 rate, LOAD_S)
    finally:
        load.close()
    loaded_ms = per_batch_ms(before, batch_counters(server))
    after_ms = statistics.median(one_call_ms(sdk, next(cycle)) for _ in range(5))
    sdk.close()

    summary = summarize(outcomes)
    timeout_ms = STEPS.queue_timeout_us(MODEL) / 1000.0
    bound_ms = timeout_ms + BATCH_MARGIN * max(batch_ms, loaded_ms) + RPC_SLACK_MS
    print(f"\noverload: idle {idle_ms:.0f} ms, batch of 8 {batch_ms:.0f} ms ({loaded_ms:.0f} "
          f"ms a batch under load), capacity "
          f"{capacity:.2f}/s, offered {rate:.2f}/s for {LOAD_S:.0f} s: {summary}; "
          f"bound {bound_ms:.0f} ms (budget {BUDGETS_MS[STEPS.step_of[MODEL]]:.0f} ms); "
          f"after {after_ms:.0f} ms")

    statuses = summary["statuses"]
    assert set(statuses) <= {OK, "UNAVAILABLE"}, statuses
    assert statuses.get("UNAVAILABLE", 0) > 0, "nothing shed at 3x capacity"
    assert statuses.get(OK, 0) > 0, "nothing served under overload"
    shed = [o for o in outcomes if not o.ok]
    assert all(any(m in o.message for m in SHED_MESSAGES) for o in shed), shed[0].message
    # accepted requests: within queue timeout + one batch's compute
    assert summary["p99_ms"] <= bound_ms, summary
    # no queue growing without bound: every answer, served or shed, came within the
    # same bound, in the last third as in the first
    latest = max(o.latency_s for o in outcomes) * 1000.0
    assert latest <= 2 * bound_ms, latest
    # recovered at once: an idle request costs what it did before the load
    assert after_ms <= 2 * idle_ms + 50.0, (after_ms, idle_ms)


def test_the_loaded_face_preprocess_runs_with_the_rules_reject_policy(server):
    policy = configured_queue_policy(server.options.model_repository, MODEL)
    assert policy is not None and policy.timeout_action == "REJECT"
    assert policy.timeout_us == STEPS.queue_timeout_us(MODEL)
    assert configured_queue_policy(server.options.model_repository, "face_detector") is None
