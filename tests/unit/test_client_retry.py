"""The SDK retries only what is safe to retry, with growing waits, within a deadline."""

from __future__ import annotations

import asyncio

import pytest
from tritonclient.utils import InferenceServerException

from kyc_client.sdk import (
    NO_RETRY,
    AsyncKycClient,
    KycAuthError,
    KycClient,
    KycInputError,
    KycServerError,
    KycTimeoutError,
    KycUnavailableError,
    RetryPolicy,
    acall_with_retries,
    call_with_retries,
)

SHED = InferenceServerException("Request timeout expired", status="StatusCode.UNAVAILABLE")
BAD = InferenceServerException("IMAGE: not an image", status="StatusCode.INVALID_ARGUMENT")
LATE = InferenceServerException("Deadline Exceeded", status="StatusCode.DEADLINE_EXCEEDED")
BROKEN = InferenceServerException("ocr_postprocess failed", status="StatusCode.INTERNAL")
# What tritonserver 2.51 answers a gRPC call without the client key (measured: the same
# for a wrong key): UNAVAILABLE, as for a request shed under overload.
NO_KEY = InferenceServerException(
    "This protocol is restricted, expecting header 'triton-grpc-protocol-kyc-client-key'",
    status="StatusCode.UNAVAILABLE")


class FakeResult:
    def as_numpy(self, name):
        import numpy as np

        values = {"FACE_FOUND": True, "BOX": [1.0, 2.0, 3.0, 4.0], "NUM_FACES": 1,
                  "QUALITY": b"{}", "LANDMARKS": [[1.0, 2.0]] * 5}
        value = values[name]
        return np.array([value if isinstance(value, list) else [value]], dtype=object)


class FakeTransport:
    """Answers with the scripted errors first, then a result; counts the calls."""

    def __init__(self, *errors: Exception):
        self.errors, self.calls = list(errors), 0

    def infer(self, model, inputs, **kwargs):
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return FakeResult()


class AsyncFakeTransport(FakeTransport):
    async def infer(self, model, inputs, **kwargs):
        return FakeTransport.infer(self, model, inputs, **kwargs)


class FakeClock:
    def __init__(self):
        self.now, self.sleeps = 0.0, []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


QUICK = RetryPolicy(base_delay_s=0.001, max_delay_s=0.004)


def client_with(transport, policy=QUICK):
    client = KycClient("127.0.0.1:1", retry=policy)
    client._client.close()
    client._client = transport
    return client


def test_find_face_retries_a_shed_request_until_it_is_served():
    transport = FakeTransport(SHED, SHED)
    assert client_with(transport).find_face(b"jpeg")["found"] is True
    assert transport.calls == 3


@pytest.mark.parametrize("error,raised", [(BAD, KycInputError), (LATE, KycTimeoutError),
                                          (BROKEN, KycServerError)])
def test_bad_input_timeouts_and_internal_errors_are_never_retried(error, raised):
    transport = FakeTransport(error)
    with pytest.raises(raised):
        client_with(transport).find_face(b"jpeg")
    assert transport.calls == 1


@pytest.mark.parametrize("policy", [QUICK, RetryPolicy(attempts=100, deadline_s=None)])
def test_a_call_without_the_client_key_is_never_retried_and_says_where_the_key_is(policy):
    transport = FakeTransport(NO_KEY, NO_KEY)
    with pytest.raises(KycAuthError) as refused:
        client_with(transport, policy).find_face(b"jpeg")
    assert transport.calls == 1
    message = str(refused.value)
    assert "KYC_CLIENT_KEY" in message and "client.key" in message and "kyc-client-key" in message
    assert not isinstance(refused.value, KycUnavailableError)  # never taken for a shed


def test_the_async_client_does_not_retry_a_call_without_the_client_key_either():
    transport = AsyncFakeTransport(NO_KEY, NO_KEY)

    async def run():
        client = AsyncKycClient("127.0.0.1:1", retry=QUICK)
        await client._client.close()
        client._client = transport
        with pytest.raises(KycAuthError):
            await client.verify(b"doc", b"selfie")

    asyncio.run(run())
    assert transport.calls == 1


def test_it_gives_up_after_the_attempts_with_the_last_error():
    last = InferenceServerException("Exceeds maximum queue size", status="StatusCode.UNAVAILABLE")
    transport = FakeTransport(SHED, SHED, SHED, last, SHED)
    with pytest.raises(KycUnavailableError, match="Exceeds maximum queue size"):
        client_with(transport).find_face(b"jpeg")
    assert transport.calls == 4  # the default attempts


def test_no_retry_tries_once():
    transport = FakeTransport(SHED)
    with pytest.raises(KycUnavailableError):
        client_with(transport, NO_RETRY).find_face(b"jpeg")
    assert transport.calls == 1


def test_the_waits_grow_exponentially_up_to_the_max_with_jitter_in_the_upper_half():
    policy = RetryPolicy(attempts=7, base_delay_s=0.1, max_delay_s=0.8, deadline_s=None)
    top = [policy.delay_s(k, rng=lambda: 1.0) for k in range(1, 7)]
    bottom = [policy.delay_s(k, rng=lambda: 0.0) for k in range(1, 7)]
    assert top == pytest.approx([0.1, 0.2, 0.4, 0.8, 0.8, 0.8])
    assert bottom == pytest.approx([v / 2 for v in top])
    clock = FakeClock()
    calls = iter([KycUnavailableError("shed")] * 6 + [None])

    def call():
        error = next(calls)
        if error:
            raise error
        return "served"

    assert call_with_retries(call, policy, sleep=clock.sleep, clock=clock,
                             rng=lambda: 1.0) == "served"
    assert clock.sleeps == pytest.approx(top)


def test_it_stops_before_a_wait_that_would_end_past_the_deadline():
    policy = RetryPolicy(attempts=100, base_delay_s=1.0, max_delay_s=1.0, deadline_s=3.5)
    clock = FakeClock()
    tries = []

    def call():
        tries.append(clock.now)
        raise KycUnavailableError(f"shed {len(tries)}")

    with pytest.raises(KycUnavailableError, match="shed 4"):
        call_with_retries(call, policy, sleep=clock.sleep, clock=clock, rng=lambda: 1.0)
    assert tries == [0.0, 1.0, 2.0, 3.0]
    assert clock.now <= policy.deadline_s


def test_the_async_form_tries_and_waits_as_the_sync_one(monkeypatch):
    policy = RetryPolicy(attempts=100, base_delay_s=0.5, max_delay_s=1.0, deadline_s=3.5)
    clock = FakeClock()
    tries = []

    async def sleep(seconds: float) -> None:
        clock.sleep(seconds)

    async def call():
        tries.append(clock.now)
        raise KycUnavailableError(f"shed {len(tries)}")

    monkeypatch.setattr("kyc_client.sdk.asyncio.sleep", sleep)
    with pytest.raises(KycUnavailableError, match="shed 5"):
        asyncio.run(acall_with_retries(call, policy, clock=clock, rng=lambda: 1.0))
    assert clock.sleeps == pytest.approx([0.5, 1.0, 1.0, 1.0])
    assert tries == pytest.approx([0.0, 0.5, 1.5, 2.5, 3.5])


def test_the_async_client_retries_verify_the_same_way():
    transport = AsyncFakeTransport(SHED, BAD)

    async def run():
        client = AsyncKycClient("127.0.0.1:1",
                                retry=RetryPolicy(base_delay_s=0.001, max_delay_s=0.002))
        await client._client.close()
        client._client = transport
        with pytest.raises(KycInputError):
            await client.verify(b"doc", b"selfie")

    asyncio.run(run())
    assert transport.calls == 2  # the shed try again, then the bad input is final


def test_a_retry_policy_that_makes_no_sense_is_refused():
    with pytest.raises(ValueError):
        RetryPolicy(attempts=0)
    with pytest.raises(ValueError):
        RetryPolicy(base_delay_s=1.0, max_delay_s=0.5)
