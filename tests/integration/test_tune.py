"""`kyc tune` with NVIDIA's Model Analyzer 1.58 (make model-analyzer) for real: it starts
our tritonserver, measures two configs of face_embedding with perf_analyzer, keeps its
reports, and writes the config it chose into (a copy of) the repository."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kyc.pipeline.modelconfig import load_config
from kyc_tools.dev.bench import tune

pytestmark = pytest.mark.integration

REPOSITORY = Path(__file__).resolve().parents[2] / "model_repository"


def test_model_analyzer_searches_face_embedding_and_its_choice_is_applied(tmp_path):
    try:
        tune.executable()
    except tune.TuneError as exc:
        pytest.fail(f"{exc} (make test installs it)")
    repository = tmp_path / "repo"
    shutil.copytree(REPOSITORY / "face_embedding", repository / "face_embedding")
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "kyc_tools.cli", "tune", "face_embedding", "--model-repository",
         str(repository), "--out", str(out), "--instances", "1", "--delays-us", "0",
         "--concurrency", "1", "--requests-per-window", "8", "--apply", "--timeout", "600"],
        capture_output=True, text=True, timeout=700, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "face_embedding: 1 instance(s)" in done.stdout
    summary = json.loads((out / "tune.json").read_text())["models"][0]
    # Model Analyzer measured the shipped config (as it is, and again as a search point)
    # and the variant with no queue delay
    assert sorted({c["delay_us"] for c in summary["candidates"]}) == [0, 2000]
    assert "face_embedding_config_default" in {c["config"] for c in summary["candidates"]}
    assert all(c["levels"][0][0] == 1 and c["levels"][0][1] > 0 for c in summary["candidates"])
    chosen = summary["chosen"]
    config = load_config(repository / "face_embedding" / "config.pbtxt")
    assert config.dynamic_batching.max_queue_delay_microseconds == chosen["delay_us"]
    assert config.max_batch_size == chosen["max_batch_size"] == 32
    # its own outputs, kept
    assert (out / "face_embedding" / "result_summary.html").is_file()
    assert (out / "results" / "metrics-model-inference.csv").is_file()
    assert list((out / "face_embedding" / "plots").glob("*.png"))
    assert "**chosen**" in (out / "README.md").read_text()
