"""kyc.decision.ledger's RedisLedger against a real redis-server (the session's
``redis_url``, tests/conftest.py): what replicas share so that a liveness token is
spent once across all of them."""

from __future__ import annotations

import secrets
import socket
import time

import numpy as np
import pytest

from kyc.decision.ledger import (
    KEY_PREFIX,
    LedgerUnavailableError,
    RedisLedger,
    RespConnection,
    ledger_from_environ,
)
from kyc.decision.policy import DecisionSettings
from kyc.decision.step import DecisionStep
from kyc.liveness.token import KEY_BYTES, LivenessClaims, TokenSealer
from kyc.pipeline.step import UnavailableError
from kyc_testing import free_port


def token_id() -> str:
    return secrets.token_hex(16)


def test_a_token_is_spent_the_first_time_and_refused_every_time_after(redis_url):
    ledger, other_replica = RedisLedger(redis_url), RedisLedger(redis_url)
    spent = token_id()
    expires = time.time() + 120
    assert ledger.spend(spent, expires) is True
    assert ledger.spend(spent, expires) is False
    assert other_replica.spend(spent, expires) is False  # another process, the same store
    assert other_replica.spend(token_id(), expires) is True


def test_an_entry_expires_with_its_token_so_the_store_holds_one_token_lifetime(redis_url):
    expires = time.time() + 120
    spent = token_id()
    assert RedisLedger(redis_url).spend(spent, expires)
    client = RespConnection(redis_url)
    assert client.command("EXPIRETIME", KEY_PREFIX + spent) == int(expires) + 1
    assert 0 < client.command("TTL", KEY_PREFIX + spent) <= 121
    assert client.command("GET", KEY_PREFIX + spent) == "1"  # no holder given: "1"
    client.close()


def test_two_replicas_spending_one_token_at_once_cannot_both_win(redis_url):
    from concurrent.futures import ThreadPoolExecutor

    spent, expires = token_id(), time.time() + 120
    ledgers = [RedisLedger(redis_url) for _ in range(8)]
    with ThreadPoolExecutor(len(ledgers)) as pool:
        wins = list(pool.map(lambda ledger: ledger.spend(spent, expires), ledgers))
    assert wins.count(True) == 1


def test_the_environment_names_the_shared_ledger(redis_url):
    ledger = ledger_from_environ({"KYC_TOKEN_LEDGER": redis_url})
    assert isinstance(ledger, RedisLedger)
    assert ledger.spend(token_id(), time.time() + 60)


def test_a_ledger_on_a_closed_port_is_unavailable_at_once():
    ledger = RedisLedger(f"redis://127.0.0.1:{free_port()}/0")
    started = time.monotonic()
    with pytest.raises(LedgerUnavailableError, match="did not answer"):
        ledger.spend(token_id(), time.time() + 60)
    assert time.monotonic() - started < 0.5


def test_a_ledger_that_never_answers_is_unavailable_after_its_timeout():
    with socket.socket() as silent:  # accepts connections (the backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        ledger = RedisLedger(f"redis://127.0.0.1:{silent.getsockname()[1]}/0", timeout_s=0.3)
        started = time.monotonic()
        with pytest.raises(LedgerUnavailableError):
            ledger.spend(token_id(), time.time() + 60)
        assert time.monotonic() - started < 1.5


def test_kyc_decision_answers_unavailable_for_a_token_it_cannot_check_and_serves_the_rest():
    """A token is never taken unchecked; a request without one needs no ledger."""
    from decision_cases import CUSTODY, NOW, TODAY, embed, request

    sealer = TokenSealer(secrets.token_bytes(KEY_BYTES))
    token = sealer.seal(LivenessClaims("s1", True, 0.9, NOW - 10, NOW + 110, ("left",), None,
                                       token_id=token_id()))
    step = DecisionStep(DecisionSettings(), 0.363, sealer,
                        lambda f: np.zeros((len(f), 1), np.float32), embed, CUSTODY,
                        today=lambda: TODAY, clock=lambda: NOW + 1,
                        ledger=RedisLedger(f"redis://127.0.0.1:{free_port()}/0"))
    with_token = request(LIVENESS_TOKEN=np.array([[token]], dtype=np.object_))
    refused, served = step.run([with_token, request()])
    assert isinstance(refused, UnavailableError) and "token ledger" in str(refused)
    assert served["DECISION"][0, 0] == b"review"


def test_a_retry_of_the_verification_that_spent_a_token_is_answered_again(redis_url):
    """A reply lost after Redis took the SET: the SDK retries UNAVAILABLE, and the same
    verification (same holder) must not turn into liveness_token_reused."""
    ledger, spent, expires = RedisLedger(redis_url), token_id(), time.time() + 120
    assert ledger.spend(spent, expires, "holder-a")
    assert ledger.spend(spent, expires, "holder-a")  # the retry
    assert not ledger.spend(spent, expires, "holder-b")  # anyone else
    assert not ledger.spend(spent, expires)
