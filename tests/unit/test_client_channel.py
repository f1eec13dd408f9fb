"""kyc_tools.channel: TLS and headers from `kyc verify`'s options to every tritonclient call."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import ClassVar

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient

from kyc_tools.channel import CLIENT_KEY_ENV, CLIENT_KEY_HEADER, Channel, as_channel, parse_header
from kyc_tools.cli import build_parser
from kyc_tools.cli.verify import channel_of
from kyc_tools.client import AsyncKycClient, KycClient
from kyc_tools.liveness_client import LivenessStream

CHANNEL = Channel("kyc.example.com:443", ssl=True, root_certificates=Path("ca.pem"),
                  headers=(("authorization", "Bearer t0k"), ("x-tenant", "7")))


class Recorder:
    """tritonclient's InferenceServerClient, recording how it is made and called."""

    made: ClassVar[list[Recorder]] = []

    def __init__(self, url, **kwargs):
        self.url, self.kwargs, self.calls = url, kwargs, []
        Recorder.made.append(self)

    def infer(self, model, inputs, **kwargs):
        self.calls.append(("infer", kwargs["headers"]))
        return "result"

    def start_stream(self, callback, **kwargs):
        self.calls.append(("start_stream", kwargs["headers"]))

    def stop_stream(self):
        pass

    def close(self):
        pass


class AsyncRecorder(Recorder):
    async def infer(self, model, inputs, **kwargs):
        return Recorder.infer(self, model, inputs, **kwargs)

    async def close(self):
        pass


@pytest.fixture
def recorded(monkeypatch):
    Recorder.made = []
    monkeypatch.delenv(CLIENT_KEY_ENV, raising=False)
    monkeypatch.setattr(grpcclient, "InferenceServerClient", Recorder)
    monkeypatch.setattr(aioclient, "InferenceServerClient", AsyncRecorder)
    return Recorder.made


def test_a_header_is_name_colon_value_with_the_name_in_lower_case():
    assert parse_header("Authorization: Bearer a:b ") == ("authorization", "Bearer a:b")
    for bad in ("no colon", ": value", "two words: x"):
        with pytest.raises(ValueError, match="name: value"):
            parse_header(bad)


def test_kyc_verify_options_make_a_tls_channel_with_every_header_in_order():
    args = build_parser().parse_args([
        "verify", "--document", "d.jpg", "--selfie", "s.jpg", "--url", "kyc.example.com:443",
        "--ca-file", "ca.pem", "--header", "Authorization: Bearer t0k", "--header", "X-Tenant: 7"])
    assert channel_of(args) == Channel("kyc.example.com:443", ssl=True,
                                       root_certificates=args.ca_file, headers=CHANNEL.headers)
    plain = build_parser().parse_args(["verify", "--document", "d", "--selfie", "s"])
    assert channel_of(plain) == Channel("127.0.0.1:8001")
    assert channel_of(build_parser().parse_args(
        ["verify", "--document", "d", "--selfie", "s", "--tls"])).ssl


def test_kyc_verify_refuses_a_header_without_a_name(capsys):
    with pytest.raises(SystemExit) as refused:
        build_parser().parse_args(["verify", "--document", "d", "--selfie", "s",
                                   "--header", "Bearer t0k"])
    assert refused.value.code == 2 and "name: value" in capsys.readouterr().err


def test_the_client_connects_with_tls_and_sends_the_headers_with_every_request(recorded):
    with KycClient(CHANNEL) as client:
        assert client._infer("face_preprocess", []) == "result"
    (made,) = recorded
    assert made.url == "kyc.example.com:443"
    assert made.kwargs == {"ssl": True, "root_certificates": "ca.pem"}
    assert made.calls == [("infer", {"authorization": "Bearer t0k", "x-tenant": "7"})]


def test_liveness_streams_carry_the_headers_too(recorded):
    LivenessStream(CHANNEL).close()
    assert recorded[0].calls == [("start_stream", dict(CHANNEL.headers))]
    assert recorded[0].kwargs["ssl"] is True


def test_the_async_client_sends_the_headers_and_a_plain_url_sends_none(recorded):
    async def run():
        client = AsyncKycClient(CHANNEL)
        await client._infer("kyc_ensemble", [])
        await client.close()
        plain = KycClient("127.0.0.1:8001")
        plain._infer("kyc_ensemble", [])

    asyncio.run(run())
    assert recorded[0].calls == [("infer", dict(CHANNEL.headers))]
    assert recorded[1].calls == [("infer", None)]
    assert recorded[1].kwargs == {"ssl": False, "root_certificates": None}


def test_with_kyc_client_key_set_a_plain_url_and_kyc_verify_carry_the_client_key(
        recorded, monkeypatch):
    monkeypatch.setenv(CLIENT_KEY_ENV, " k3y-of-the-operator ")
    KycClient("127.0.0.1:8001")._infer("kyc_ensemble", [])
    LivenessStream("127.0.0.1:8001").close()
    carried = {CLIENT_KEY_HEADER: "k3y-of-the-operator"}
    assert [made.calls[0][1] for made in recorded] == [carried, carried]
    assert CLIENT_KEY_HEADER == "triton-grpc-protocol-kyc-client-key"
    verify = ["verify", "--document", "d", "--selfie", "s"]
    assert channel_of(build_parser().parse_args(verify)).metadata == carried
    given = build_parser().parse_args([*verify, "--header", f"{CLIENT_KEY_HEADER}: other"])
    assert channel_of(given).metadata == {CLIENT_KEY_HEADER: "other"}
    assert as_channel(CHANNEL) is CHANNEL  # a channel given whole is used as it is
    monkeypatch.setenv(CLIENT_KEY_ENV, "")
    assert as_channel("h:1").metadata is None
