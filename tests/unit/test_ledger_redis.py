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
    BEGAN_KEY,
    KEY_PREFIX,
    LedgerUnavailableError,
    RedisLedger,
    RespConnection,
    Spend,
    ledger_from_environ,
)
from kyc.decision.policy import DecisionSettings
from kyc.decision.step import DecisionStep
from kyc.face.match import FaceThresholds
from kyc.keys import KEY_BYTES
from kyc.liveness.token import LivenessClaims, TokenSealer
from kyc.pipeline.step import UnavailableError
from kyc_testing import free_port


def token_id() -> str:
    return secrets.token_hex(16)


def spend(ledger: RedisLedger, token: str, holder: str = "",
          issued_at: float | None = None) -> Spend:
    now = time.time()
    return ledger.spend(token, now if issued_at is None else issued_at, now + 120, holder)


def test_a_token_is_spent_the_first_time_and_refused_every_time_after(redis_url):
    ledger, other_replica = RedisLedger(redis_url), RedisLedger(redis_url)
    spent = token_id()
    assert spend(ledger, spent) is Spend.FIRST
    assert spend(ledger, spent) is Spend.TAKEN
    assert spend(other_replica, spent) is Spend.TAKEN  # another process, the same store
    assert spend(other_replica, token_id()) is Spend.FIRST


def test_an_entry_expires_with_its_token_so_the_store_holds_one_token_lifetime(redis_url):
    expires = time.time() + 120
    spent = token_id()
    assert RedisLedger(redis_url).spend(spent, time.time(), expires, "").accepted
    client = RespConnection(redis_url)
    assert client.command("EXPIRETIME", KEY_PREFIX + spent) == int(expires) + 1
    assert 0 < client.command("TTL", KEY_PREFIX + spent) <= 121
    assert client.command("GET", KEY_PREFIX + spent) == "1"  # no holder given: "1"
    client.close()


def test_two_replicas_spending_one_token_at_once_cannot_both_win(redis_url):
    from concurrent.futures import ThreadPoolExecutor

    spent = token_id()
    ledgers = [RedisLedger(redis_url) for _ in range(8)]
    with ThreadPoolExecutor(len(ledgers)) as pool:
        wins = list(pool.map(lambda ledger: spend(ledger, spent), ledgers))
    assert wins.count(Spend.FIRST) == 1 and wins.count(Spend.TAKEN) == 7


def test_the_environment_names_the_shared_ledger(redis_url):
    ledger = ledger_from_environ({"KYC_TOKEN_LEDGER": redis_url})
    assert isinstance(ledger, RedisLedger)
    assert spend(ledger, token_id()) is Spend.FIRST


def test_a_ledger_on_a_closed_port_is_unavailable_at_once():
    ledger = RedisLedger(f"redis://127.0.0.1:{free_port()}/0")
    started = time.monotonic()
    with pytest.raises(LedgerUnavailableError, match="did not answer"):
        spend(ledger, token_id())
    assert time.monotonic() - started < 0.5


def test_a_ledger_that_never_answers_is_unavailable_after_its_timeout():
    with socket.socket() as silent:  # accepts connections (the backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        ledger = RedisLedger(f"redis://127.0.0.1:{silent.getsockname()[1]}/0", timeout_s=0.3)
        started = time.monotonic()
        with pytest.raises(LedgerUnavailableError):
            spend(ledger, token_id())
        assert time.monotonic() - started < 1.5


def test_kyc_decision_answers_unavailable_for_a_token_it_cannot_check_and_serves_the_rest():
    """A token is never taken unchecked; a request without one needs no ledger."""
    from decision_cases import CUSTODY, NOW, TODAY, embed, request

    sealer = TokenSealer(secrets.token_bytes(KEY_BYTES))
    token = sealer.seal(LivenessClaims("s1", True, 0.9, NOW - 10, NOW + 110, ("left",), None,
                                       {}, None, token_id()))
    step = DecisionStep(DecisionSettings(), FaceThresholds(0.363, 0.363), sealer,
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
    ledger, spent = RedisLedger(redis_url), token_id()
    assert spend(ledger, spent, "holder-a") is Spend.FIRST
    assert spend(ledger, spent, "holder-a") is Spend.AGAIN  # the retry
    assert spend(ledger, spent, "holder-b") is Spend.TAKEN  # anyone else
    assert spend(ledger, spent) is Spend.TAKEN


def test_a_restarted_redis_refuses_the_tokens_issued_before_it_began(redis_url):
    """Redis keeps nothing on disk: after a restart (here: its keys flushed) a token
    issued before cannot be known unspent, so it is not taken."""
    ledger, spent = RedisLedger(redis_url), token_id()  # it began, at the latest, now
    issued = time.time()
    assert spend(ledger, spent, "a", issued) is Spend.FIRST
    client = RespConnection(redis_url)
    assert float(client.command("GET", BEGAN_KEY)) <= issued
    client.command("FLUSHDB")  # what a restart without persistence leaves
    time.sleep(0.01)  # a restart takes time: the new start is later than the token
    assert spend(ledger, spent, "b", issued) is Spend.UNKNOWN
    assert spend(ledger, token_id(), "b", time.time() + 1) is Spend.FIRST  # issued since
    client.close()
