"""The hostile-input corpus (tests/hostile.py) against a real server of its own.

Every request must end as its case says (its own INVALID_ARGUMENT with a clear
message, or the documented safe result), valid requests sharing its batches are
answered correctly, and afterwards the server is healthy, answers as before, runs
the same stub processes (none restarted) and holds no more memory than the bound.
A request that admission control sheds (UNAVAILABLE, at capacity: a busy machine) is
sent again after the SDK's backoff, as a client does, and must then end as its case
says. ``KYC_HOSTILE_REPORT=FILE`` writes the per-class summary, the sheds and what
moved in memory pass by pass as JSON.
"""

from __future__ import annotations

import io
import itertools
import json
import os
import statistics
import string
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from PIL import Image

import hostile
from kyc_testing import concurrently_as_a_client, shipped_server
from kyc_tools.assets.fetch import fetch_test_photos
from kyc_tools.dev.bench.procmem import resident_by_kind
from kyc_tools.dev.bench.stats import process_memory
from kyc_tools.dev.synthetic.document import Degradation, random_identity, render_document
from kyc_tools.operator.procs import children, stub_instance
from kyc_tools.operator.server import is_ready
from kyc_tools.repo.config import load_config

pytestmark = pytest.mark.integration

# The most the server and its stubs may grow over the passes of the corpus (distinct
# resident pages, each time after a valid request to every model): the first pass
# takes the arenas and the Python backend's shared-memory regions to their marks
# (measured +230 to +250 MiB, eight 20 MiB requests at once among them;
# docs/reliability.md, "Memory").
MEMORY_BOUND_MIB = 600.0
# Then memory levels off: after the third pass, no more than this share above the
# highest mark of the two before (measured here: -1.3%, +0.7%, +0.6%, each pass after
# the first moving by 10 MiB or less but face_preprocess's heap and ocr_det's elastic
# arena; +3.1% and +3.2% in CI while the regions grew in 1 MiB steps and the gRPC
# frontend kept 8 request objects, kyc_tools.operator.server). A fall is no risk.
LEVEL_SHARE = 0.03
PASSES = 3
PRINTABLE = set(string.printable)


def parameter(repository: Path, model: str, key: str) -> int:
    return int(load_config(repository / model / "config.pbtxt").parameters[key].string_value)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    with shipped_server(tmp_path_factory.mktemp("hostile")) as (repository, server):
        yield server, repository, server.log_file


@pytest.fixture(scope="module")
def images():
    photos = fetch_test_photos()
    photo = np.asarray(Image.open(photos["person_a_1"]).convert("RGB"))
    small = io.BytesIO()
    Image.open(photos["person_b_1"]).convert("RGB").resize((120, 150)).save(small, "JPEG")
    rng = np.random.default_rng(5)
    document = render_document(random_identity(rng), "td3", photo, Degradation(), rng)
    return {"photo": photo, "filler": small.getvalue(), "document": document.jpeg_bytes(),
            "selfie": photos["person_a_2"].read_bytes()}


def tensors(step: hostile.Step) -> list[grpcclient.InferInput]:
    out = []
    for t in step.inputs:
        tensor = grpcclient.InferInput(t.name, list(t.array.shape), t.datatype)
        tensor.set_data_from_numpy(t.array)
        out.append(tensor)
    return out


def resident_mib(pid: int) -> float:
    return statistics.median(process_memory(pid)["resident_mib"] for _ in range(3))


def by_process(pid: int) -> dict[str, dict[str, float]]:
    """Resident MiB of the server and each stub by kind of mapping (a region of
    /dev/shm counts in the server and in its stub)."""
    procs = {"tritonserver": pid, **{stub_instance(s): s for s in children(pid)}}
    return {name: resident_by_kind(p) for name, p in sorted(procs.items())}


def moved(before: dict, after: dict, least: float = 2.0) -> dict[str, float]:
    """What moved by ``least`` MiB or more between two ``by_process`` snapshots."""
    out = {f"{name} {kind}": round(mib - before.get(name, {}).get(kind, 0.0), 1)
           for name, kinds in after.items() for kind, mib in kinds.items()}
    return {k: v for k, v in sorted(out.items(), key=lambda kv: -abs(kv[1])) if abs(v) >= least}


def clear(message: str) -> bool:
    """A message a person can act on: short, printable, no traceback."""
    return (0 < len(message) < 600 and "Traceback" not in message
            and set(message) <= PRINTABLE)


def outcome(expect: str, result) -> str | None:
    """None when ``result`` is what ``expect`` allows, else what went wrong."""
    if isinstance(result, Exception):
        status, message = str(result.status()), result.message()
        if expect in (hostile.INVALID, hostile.ANSWER_OR_INVALID) \
                and "INVALID_ARGUMENT" in status:
            return None if clear(message) else f"unclear message {message[:200]!r}"
        return f"{status}: {message[:200]}"
    if expect in (hostile.INVALID,):
        return "answered, expected INVALID_ARGUMENT"
    if expect == hostile.TOKEN_INVALID:
        report = json.loads(result.as_numpy("REPORT")[0, 0])
        ok = report["decision"] != "approve" and "liveness_token_invalid" in report["reasons"]
        return None if ok else f"token not refused: {report['decision']} {report['reasons']}"
    if expect == "NOT_LIVE":
        return None if not bool(result.as_numpy("IS_LIVE")[0, 0]) else "a verdict of live"
    return None  # "OK" and ANSWER_OR_INVALID answered


def valid_inputs(model: str, images: dict) -> list[grpcclient.InferInput]:
    if model == "kyc_ensemble":
        step = hostile.Step((hostile.encoded("DOCUMENT_IMAGE", images["document"]),
                             hostile.encoded("SELFIE_IMAGE", images["selfie"]),
                             hostile.encoded("LIVENESS_TOKEN", b"")), "OK")
    else:
        step = hostile.Step((hostile.encoded("IMAGE", images["document"] if model ==
                                             "document_ocr" else images["selfie"]),), "OK")
    return tensors(step)


def answer_of(model: str, result) -> object:
    """What a valid request's answer must equal before and after the corpus."""
    if model == "face_preprocess":
        return bool(result.as_numpy("FACE_FOUND")[0, 0]), int(result.as_numpy("NUM_FACES")[0, 0])
    if model == "document_ocr":
        return json.loads(result.as_numpy("DOCUMENT")[0, 0])["fields"]["document_number"]
    report = json.loads(result.as_numpy("REPORT")[0, 0])
    return report["decision"], sorted(report["reasons"])


class Corpus:
    """Sends the corpus and records how each request ended."""

    def __init__(self, url: str, cases: list[hostile.Case], images: dict, before: dict):
        self.url, self.cases, self.images, self.before = url, cases, images, before
        self.failures: list[str] = []
        self.summary: dict[tuple[str, str], Counter] = defaultdict(Counter)
        self.sent = 0
        self.retried = 0  # requests shed by admission control, then sent again
        self._ids = itertools.count(1)

    def record(self, case: hostile.Case, step: hostile.Step, result) -> None:
        problem = outcome(step.expect, result)
        status = ("OK" if not isinstance(result, Exception)
                  else str(result.status()).replace("StatusCode.", ""))
        self.summary[(case.kind, case.model)][status] += 1
        self.sent += 1
        if problem:
            self.failures.append(f"{case.kind} -> {case.model}: {problem}")

    def _count_shed(self) -> None:
        self.retried += 1

    def send(self, client: grpcclient.InferenceServerClient) -> None:
        # one-request cases: 7 hostile and 1 valid request at once, so they share batches
        for model in MODELS:
            mine = [c for c in self.cases if c.model == model]
            for k in range(0, len(mine), 7):
                chunk = mine[k:k + 7]
                # every kyc_ensemble batch: a hostile request there once failed its
                # valid batch-mates (docs/reliability.md, the defect behind kyc_intake)
                check_valid = model != "document_ocr" or k % 28 == 0
                inputs = [tensors(c.steps[0]) for c in chunk]
                if check_valid:
                    inputs.append(valid_inputs(model, self.images))
                results = concurrently_as_a_client(self.url, model, inputs, self._count_shed)
                for case, result in zip(chunk, results, strict=False):
                    self.record(case, case.steps[0], result)
                if check_valid:
                    valid = results[-1]
                    assert not isinstance(valid, Exception), f"{model}: valid failed: {valid}"
                    assert answer_of(model, valid) == self.before[model]
        # liveness_sequence: each case is a session of its own
        for case in (c for c in self.cases if c.model == "liveness_sequence"):
            sid = case.sequence_id if case.sequence_id is not None else \
                f"hostile-{next(self._ids)}"
            for step in case.steps:
                start, end = step.sequence
                try:
                    result = client.infer("liveness_sequence", tensors(step), sequence_id=sid,
                                          sequence_start=start, sequence_end=end,
                                          client_timeout=60)
                except Exception as exc:
                    result = exc
                self.record(case, step, result)

    def table(self) -> dict[str, dict[str, int]]:
        return {f"{kind} -> {model}": dict(counts)
                for (kind, model), counts in sorted(self.summary.items())}


MODELS = ("face_preprocess", "document_ocr", "kyc_ensemble")


def test_every_hostile_request_fails_alone_and_leaves_the_server_as_it_was(served, images):
    server, repository, log_file = served
    # face_preprocess and ocr_preprocess take the client limits from kyc_intake's config
    client_limit = parameter(repository, "kyc_intake", "max_image_bytes")
    max_bytes = {
        "face_preprocess": client_limit, "document_ocr": client_limit,
        "kyc_ensemble": client_limit,
        "liveness_sequence": parameter(repository, "liveness_sequence", "max_image_bytes"),
    }
    cases = hostile.corpus(images["photo"], images["filler"], images["document"],
                           images["selfie"], max_bytes)
    client = grpcclient.InferenceServerClient(server.options.grpc_url)
    before = {m: answer_of(m, client.infer(m, valid_inputs(m, images))) for m in MODELS}
    assert before["face_preprocess"] == (True, 1)
    pid = server.process.pid
    stubs, memory, snapshots = set(children(pid)), [resident_mib(pid)], [by_process(pid)]

    # three times: every outcome must hold on a warm server too, valid requests answer
    # as before after each pass, and memory levels off
    passes, afters = [], []
    for _ in range(PASSES):
        corpus = Corpus(server.options.grpc_url, cases, images, before)
        corpus.send(client)
        passes.append(corpus)
        # memory as ordinary traffic leaves it: elastic arenas (ocr_det's shrinks after
        # a batch of pages, keeps one page) in their state after a single request
        afters.append({m: answer_of(m, client.infer(m, valid_inputs(m, images)))
                       for m in MODELS})
        memory.append(resident_mib(pid))
        snapshots.append(by_process(pid))
    client.close()
    first = passes[0]
    report = {"requests_per_pass": first.sent, "cases": len(cases), "classes": first.table(),
              "shed_then_sent_again": [corpus.retried for corpus in passes],
              "memory_mib": {"before": memory[0],
                             **{f"after_pass_{k}": m for k, m in enumerate(memory[1:], 1)}},
              # where it went, pass by pass: process and kind of mapping
              # (kyc_tools.dev.bench.procmem)
              "moved_mib": {f"pass_{k}": moved(snapshots[k - 1], snapshots[k])
                            for k in range(1, len(snapshots))},
              "stub_processes": len(stubs)}
    print("\nhostile inputs:", json.dumps(report, indent=1))
    if os.environ.get("KYC_HOSTILE_REPORT"):
        Path(os.environ["KYC_HOSTILE_REPORT"]).write_text(json.dumps(report, indent=1))

    assert first.sent >= 500
    for corpus in passes:
        assert not corpus.failures, f"{len(corpus.failures)} unexpected outcomes:\n" + \
            "\n".join(corpus.failures[:30])
    assert is_ready(server.options.http_url)
    assert all(after == before for after in afters)
    assert set(children(pid)) == stubs, "a stub process was restarted or added"
    log = log_file.read_text(errors="replace")
    assert "Stub process" not in log and "unhealthy" not in log
    assert max(memory[1:]) <= memory[0] + MEMORY_BOUND_MIB, "memory beyond the documented bound"
    assert memory[3] <= (1 + LEVEL_SHARE) * max(memory[1:3]), \
        f"memory did not level off: {memory}; " \
        f"moved in the last pass: {report['moved_mib'][f'pass_{PASSES}']}"
