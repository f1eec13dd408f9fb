"""Two replicas behind one service: a liveness token sealed by one is read by the
other when both have the same key, and refused, naming both key ids, when not; and
spent once across replicas that share the ledger (KYC_TOKEN_LEDGER, a real Redis).

The session's server is replica A; this module starts two more servers over copies
of the repository: one with A's token key, one with a key of its own; then two with
A's key and one redis-server of the module's own as their ledger."""

from __future__ import annotations

import base64
import contextlib
import secrets

import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from kyc.decision.ledger import ENV_LEDGER
from kyc.keys import ENV_KEY, ENV_KEY_FILE, key_id, load_key
from kyc_client.liveness import LivenessReply
from kyc_customers import verify as kyc_verify
from kyc_testing import (
    SHIPPED_REPOSITORY,
    Person,
    copy_tree,
    live_session,
    redis_server,
    start_server,
)
from kyc_tools.assets.fetch import fetch_test_photos
from kyc_tools.cli import main

pytestmark = pytest.mark.integration


def live_token(grpc_url: str) -> bytes:
    end = live_session(grpc_url, Person(grpc_url))[-1]
    assert isinstance(end, LivenessReply) and end.is_live, end
    return end.token


def verify(grpc_url: str, document: bytes, selfie: bytes, token: bytes) -> dict:
    with grpcclient.InferenceServerClient(grpc_url) as client:
        return kyc_verify(client, document, selfie, token)


@pytest.fixture(scope="module")
def customer(server, tmp_path_factory):
    """A document, a selfie of its holder, and a token sealed by replica A."""
    samples = tmp_path_factory.mktemp("samples")
    assert main(["samples", "--out", str(samples)]) == 0
    selfie = fetch_test_photos()["person_a_2"].read_bytes()
    return (samples / "document.jpg").read_bytes(), selfie, live_token(server.options.grpc_url)


def replica(tmp_path_factory, monkeypatch_env: dict[str, str]):
    root = tmp_path_factory.mktemp("replica")
    with pytest.MonkeyPatch.context() as patch:
        for name in (ENV_KEY, ENV_KEY_FILE):
            patch.delenv(name, raising=False)
        for name, value in monkeypatch_env.items():
            patch.setenv(name, value)
        return start_server(copy_tree(SHIPPED_REPOSITORY, root / "repo"), root / "log.txt")


def test_a_replica_with_the_same_key_reads_the_token(server, customer, tmp_path_factory):
    other = replica(tmp_path_factory, server.token_key_environment)
    try:
        assert other.token_key_id == server.token_key_id
        # a token of A's from before B started: B's ledger cannot know it unspent
        early = verify(other.options.grpc_url, *customer)
        token = live_token(server.options.grpc_url)  # sealed by A while B serves
        report = verify(other.options.grpc_url, *customer[:2], token)
    finally:
        other.stop()
    assert early["reasons"] == ["liveness_token_expired"], early["reasons"]
    assert "before the ledger of spent tokens began" in early["liveness"]["problem"]
    assert report["liveness"]["valid"] is True and report["liveness"]["live"] is True
    assert "liveness_token_invalid" not in report["reasons"]
    # all passed but passive PAD, which no shipped repository has
    assert report["reasons"] == ["liveness_without_passive_pad"], report["reasons"]


def test_a_replica_with_another_key_refuses_the_token_naming_both_keys(
        server, customer, tmp_path_factory):
    own_key = base64.b64encode(secrets.token_bytes(32)).decode()
    other = replica(tmp_path_factory, {ENV_KEY: own_key})
    try:
        report = verify(other.options.grpc_url, *customer)
    finally:
        other.stop()
    ours = key_id(load_key(server.token_key_environment))
    theirs = key_id(base64.b64decode(own_key))
    assert other.token_key_id == theirs != ours
    assert report["decision"] == "reject" and "liveness_token_invalid" in report["reasons"]
    problem = report["liveness"]["problem"]
    assert ours in problem and theirs in problem
    assert "every server must have the same KYC_TOKEN_KEY" in problem


@pytest.fixture(scope="module")
def shared_ledger(server, tmp_path_factory):
    """Two replicas with A's token key and one ledger, a redis-server of this module's
    own (the last test stops it): (replica 1, replica 2, what stops the ledger)."""
    with contextlib.ExitStack() as stack:
        ledger = stack.enter_context(contextlib.ExitStack())
        url = ledger.enter_context(redis_server(tmp_path_factory.mktemp("ledger")))
        environment = {**server.token_key_environment, ENV_LEDGER: url}
        one = replica(tmp_path_factory, environment)
        stack.callback(one.stop)
        two = replica(tmp_path_factory, environment)
        stack.callback(two.stop)
        yield one, two, ledger.close


def other_photo(jpeg: bytes) -> bytes:
    """The same page saved again: other bytes, so another verification of the token."""
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.open(io.BytesIO(jpeg)).save(out, "JPEG", quality=90)
    return out.getvalue()


def test_a_token_spent_on_one_replica_is_refused_on_the_other_and_a_fresh_one_is_read(
        shared_ledger, customer):
    one, two, _ = shared_ledger
    document, selfie, _ = customer
    token = live_token(one.options.grpc_url)
    first = verify(one.options.grpc_url, document, selfie, token)
    assert first["reasons"] == ["liveness_without_passive_pad"], first["reasons"]
    retried = verify(two.options.grpc_url, document, selfie, token)  # a lost reply, retried
    assert retried["reasons"] == first["reasons"]
    again = verify(two.options.grpc_url, other_photo(document), selfie, token)
    assert again["decision"] == "reject" and "liveness_token_reused" in again["reasons"]
    fresh = verify(two.options.grpc_url, document, selfie, live_token(one.options.grpc_url))
    assert fresh["reasons"] == ["liveness_without_passive_pad"], fresh["reasons"]


def test_with_the_ledger_down_a_token_answers_unavailable_and_a_request_without_one_is_served(
        shared_ledger, customer):
    """Last in the module: it stops the ledger."""
    one, _, stop_ledger = shared_ledger
    document, selfie, _ = customer
    token = live_token(one.options.grpc_url)
    stop_ledger()
    with pytest.raises(InferenceServerException) as refused:
        verify(one.options.grpc_url, document, selfie, token)
    assert "UNAVAILABLE" in str(refused.value.status()), refused.value
    assert "token ledger did not answer" in refused.value.message()
    without = verify(one.options.grpc_url, document, selfie, b"")
    assert without["decision"] == "review" and "liveness_missing" in without["reasons"]
