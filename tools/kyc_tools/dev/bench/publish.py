"""First request after a version switch, for ``kyc bench`` (group ``publish``).

For each heavy model measured here, on the bench's own server and repository copy:

1. the steady latency of one request (median of a few, after one discarded);
2. ``kyc repo publish`` of the model's current files as the next version (the
   step an ML engineer runs), then a load through the model-control API with the
   shipped config, which is what the poller does in poll mode: the new version
   runs its ``model_warmup`` before it takes requests; then the latency of the
   first request and of the second;
3. the same again with the config less ``model_warmup`` (an override config), to
   show what the warm-up saves;
4. the shipped config loaded back.

Every input is generated (an aligned face of a real test photo, a text-line crop
of a rendered document). Logs carry model names and timings only.
"""

from __future__ import annotations

import json
import logging
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from kyc_tools.dev.bench.core import Bench
from kyc_tools.dev.bench.options import CLIENT_TIMEOUT_S, BenchError

log = logging.getLogger(__name__)

STEADY_REQUESTS = 5
READY_TIMEOUT_S = 120.0


def first_request_after_publish(bench: Bench, model: str, name: str, payload: np.ndarray,
                                output: str) -> dict[str, Any]:
    """The figures of steps 1-4 above for ``model`` fed ``payload`` as input ``name``."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import np_to_triton_dtype

    from kyc_client.channel import as_channel
    from kyc_tools.repo.check import version_dirs
    from kyc_tools.repo.publish import publish

    headers = bench.admin_headers
    channel = as_channel(bench.grpc_url)  # with the client key found here
    client = channel.grpc_client(grpcclient)

    def once() -> float:
        tensor = grpcclient.InferInput(name, list(payload.shape),
                                       np_to_triton_dtype(payload.dtype))
        tensor.set_data_from_numpy(payload)
        started = time.perf_counter()
        client.infer(model, [tensor], outputs=[grpcclient.InferRequestedOutput(output)],
                     client_timeout=CLIENT_TIMEOUT_S, headers=channel.metadata)
        return round((time.perf_counter() - started) * 1e3, 1)

    def switch(config: dict[str, Any]) -> dict[str, Any]:
        src = version_dirs(bench.repository / model)[-1]
        version = publish(bench.repository, model, src).version
        started = time.perf_counter()
        client.load_model(model, config=json.dumps(config), headers=headers,
                          client_timeout=READY_TIMEOUT_S)
        _wait_ready(lambda: client.is_model_ready(model, str(version)), model, version)
        load_s = round(time.perf_counter() - started, 2)
        first, second = once(), once()
        return {"version": version, "load_s": load_s, "first_ms": first, "second_ms": second}

    try:
        once()
        steady = statistics.median(once() for _ in range(STEADY_REQUESTS))
        shipped = client.get_model_config(model, as_json=True)["config"]
        if "model_warmup" not in shipped:
            raise BenchError(f"{model} has no model_warmup in its config")
        with_warmup = switch(shipped)
        without = switch({k: v for k, v in shipped.items() if k != "model_warmup"})
        client.load_model(model, config=json.dumps(shipped), headers=headers,
                          client_timeout=READY_TIMEOUT_S)
    except BenchError:
        raise
    except Exception as exc:  # InferenceServerException, PublishError: say where
        raise BenchError(f"first request after publish of {model}: {exc}") from None
    finally:
        client.close()
    log.info("%s: steady %.1f ms, first after publish %.1f ms with warm-up, %.1f ms without",
             model, steady, with_warmup["first_ms"], without["first_ms"])
    return {"input": f"{name} {list(payload.shape)} {payload.dtype}", "steady_ms": steady,
            "with_warmup": with_warmup, "without_warmup": without,
            "first_over_steady_ms": round(with_warmup["first_ms"] - steady, 1),
            "first_over_steady_ms_without_warmup": round(without["first_ms"] - steady, 1)}


def _wait_ready(ready: Callable[[], bool], model: str, version: int) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not ready():
        if time.monotonic() > deadline:
            raise BenchError(f"{model} version {version} was not ready after "
                             f"{READY_TIMEOUT_S:.0f} s")
        time.sleep(0.05)
