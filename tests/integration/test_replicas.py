"""Two replicas behind one service: a liveness token sealed by one is read by the
other when both have the same key, and refused, naming both key ids, when not.

The session's server is replica A; this module starts two more servers over copies
of the repository: one with A's token key, one with a key of its own."""

from __future__ import annotations

import base64
import secrets

import pytest
import tritonclient.grpc as grpcclient
from test_kyc_ensemble import verify as kyc_verify

from kyc.assets.fetch import fetch_test_photos
from kyc.cli import main
from kyc.liveness.client import LivenessReply
from kyc.liveness.token import ENV_KEY, ENV_KEY_FILE, key_id, load_key
from kyc_testing import SHIPPED_REPOSITORY, Person, copy_tree, live_session, start_server

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
        report = verify(other.options.grpc_url, *customer)
    finally:
        other.stop()
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
