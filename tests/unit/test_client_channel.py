"""kyc_client.channel: TLS and headers from `kyc verify`'s options to every tritonclient call."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import ClassVar

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient

from kyc_client.channel import (
    CLIENT_KEY_ENV,
    CLIENT_KEY_HEADER,
    Channel,
    as_channel,
    client_key_headers,
    default_client_key_file,
    parse_header,
)
from kyc_client.liveness import LivenessStream
from kyc_client.sdk import AsyncKycClient, KycClient
from kyc_tools.cli import build_parser
from kyc_tools.cli.verify import channel_of

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


@pytest.fixture(autouse=True)
def no_client_key_here(monkeypatch, tmp_path):
    """A machine where no client key is found, until a test puts one."""
    monkeypatch.delenv(CLIENT_KEY_ENV, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


@pytest.fixture
def recorded(monkeypatch):
    Recorder.made = []
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


def test_without_kyc_client_key_every_client_sends_the_key_file_kyc_serve_made_here(
        recorded, monkeypatch, tmp_path):
    key_file = default_client_key_file()
    assert key_file == tmp_path / "config" / "kyc" / "client.key"
    assert client_key_headers() == {} and as_channel("h:1").metadata is None  # no file: none
    key_file.parent.mkdir(parents=True)
    key_file.write_text("f11e-key-of-kyc-serve\n")
    carried = {CLIENT_KEY_HEADER: "f11e-key-of-kyc-serve"}
    KycClient("127.0.0.1:8001")._infer("kyc_ensemble", [])
    LivenessStream("127.0.0.1:8001").close()
    assert [made.calls[0][1] for made in recorded] == [carried, carried]
    verify = ["verify", "--document", "d", "--selfie", "s"]
    assert channel_of(build_parser().parse_args(verify)).metadata == carried
    assert client_key_headers() == carried  # what a raw tritonclient call passes as headers
    monkeypatch.setenv(CLIENT_KEY_ENV, "env-key-of-the-operator")  # the variable wins
    assert as_channel("h:1").metadata == {CLIENT_KEY_HEADER: "env-key-of-the-operator"}


class Refused(Recorder):
    """A server started with a client key, called without it (tritonserver 2.51's answer)."""

    def infer(self, model, inputs, **kwargs):
        from tritonclient.utils import InferenceServerException

        self.calls.append(("infer", kwargs["headers"]))
        raise InferenceServerException(
            "This protocol is restricted, expecting header "
            "'triton-grpc-protocol-kyc-client-key'", status="StatusCode.UNAVAILABLE")


def test_kyc_verify_without_the_key_says_where_the_key_is_and_exits_1_at_once(
        recorded, monkeypatch, tmp_path, capsys):
    from kyc_tools.cli import main

    monkeypatch.setattr(grpcclient, "InferenceServerClient", Refused)
    for name in ("d.jpg", "s.jpg"):
        (tmp_path / name).write_bytes(b"jpeg")
    code = main(["verify", "--document", str(tmp_path / "d.jpg"),
                 "--selfie", str(tmp_path / "s.jpg")])
    err = capsys.readouterr().err
    assert code == 1 and len(recorded[0].calls) == 1  # not retried as a shed request
    assert "kyc verify: KycAuthError: the server needs its client key" in err
    assert CLIENT_KEY_ENV in err and str(default_client_key_file()) in err


class Answering(AsyncRecorder):
    """An asyncio client whose every call is answered with a zero tensor."""

    async def infer(self, model, inputs, **kwargs):
        import numpy as np

        Recorder.infer(self, model, inputs, **kwargs)
        return type("Result", (), {"as_numpy": lambda self, name: np.zeros((1, 1))})()


def test_the_bench_loads_send_the_client_key_found_here(recorded, monkeypatch):
    import numpy as np

    from kyc_tools.dev.bench import perf_analyzer
    from kyc_tools.dev.bench.core import TensorClient

    monkeypatch.setattr(perf_analyzer, "executable", lambda: "/x/perf_analyzer")
    monkeypatch.setattr(aioclient, "InferenceServerClient", Answering)

    def perf_argv() -> list[str]:
        return perf_analyzer.command("kyc_ensemble", "127.0.0.1:8001", 2, Path("in.json"),
                                     Path("out.csv"), requests_per_window=4)

    assert "-H" not in perf_argv()  # no key found: none sent
    monkeypatch.setenv(CLIENT_KEY_ENV, "k3y-of-the-operator")
    argv = perf_argv()  # perf_analyzer 2.51 sends -H as gRPC metadata too (measured)
    assert argv[argv.index("-H") + 1] == f"{CLIENT_KEY_HEADER}:k3y-of-the-operator"
    client = TensorClient("127.0.0.1:8001", "face_embedding", "FACE",
                          [np.zeros((1, 4), np.float32)], "EMBEDDING", "faces")
    assert asyncio.run(client.next()) == {"faces": 1}
    assert recorded[-1].calls == [("infer", {CLIENT_KEY_HEADER: "k3y-of-the-operator"})]
