"""kyc tune's own part around Model Analyzer: the search it writes from the shipped
config, the figures it reads back, the choice, and the choice written into the config."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kyc.pipeline.modelconfig import load_config
from kyc_tools.dev.bench import tune
from kyc_tools.dev.bench.tune import Candidate, Search, TuneError

REPOSITORY = Path(__file__).resolve().parents[2] / "model_repository"
SERVER = {"path": "/x/tritonserver", "flags": {"backend-directory": "/x/backends"},
          "environment": {"PATH": "/v/bin"}, "perf_analyzer": "/v/bin/perf_analyzer"}


def candidate(name, instances, delay, levels, batch=8):
    return Candidate(name, instances, batch, delay, tuple(levels))


def test_ensembles_and_bls_steps_are_refused_with_what_to_tune_instead():
    for model in ("document_ocr", "ocr_postprocess", "kyc_decision"):
        with pytest.raises(TuneError, match="tune the ONNX models they call"):
            tune.tunable(REPOSITORY, model)
    tune.tunable(REPOSITORY, "ocr_det")


def test_variable_inputs_take_the_shape_of_the_models_warmup_sample():
    assert tune.warmup_shapes(REPOSITORY, "ocr_det") == ["IMAGES:960,960,3"]
    assert tune.warmup_shapes(REPOSITORY, "ocr_rec") == ["IMAGES:48,320,3"]
    assert tune.warmup_shapes(REPOSITORY, "face_embedding") == []


def test_the_search_always_contains_the_shipped_values(tmp_path):
    config = tune.analyzer_config(REPOSITORY, ["ocr_det", "face_embedding"],
                                  Search(instances=(2,), delays_us=(0,), concurrency=(1, 4)),
                                  tmp_path, SERVER, (1, 2, 3))
    det = config["profile_models"]["ocr_det"]
    shipped = tune.shipped_values(REPOSITORY, "ocr_det")
    assert det["cpu_only"] is True
    assert det["model_config_parameters"]["instance_group"] == [
        [{"count": n, "kind": "KIND_CPU"}] for n in sorted({2, shipped["instances"]})]
    assert det["model_config_parameters"]["dynamic_batching"] == {
        "max_queue_delay_microseconds": sorted({0, shipped["delay_us"]})}
    assert det["model_config_parameters"]["max_batch_size"] == [shipped["max_batch_size"]]
    assert det["perf_analyzer_flags"] == {
        "measurement-mode": "count_windows", "measurement-request-count": 16, "max-trials": 3,
        "stability-percentage": 1000, "shape": ["IMAGES:960,960,3"]}
    assert det["parameters"] == {"concurrency": [1, 4]}
    assert "shape" not in config["profile_models"]["face_embedding"]["perf_analyzer_flags"]
    assert config["triton_launch_mode"] == "local"
    assert config["run_config_search_disable"] is True
    assert config["triton_grpc_endpoint"] == "127.0.0.1:2"
    assert config["triton_server_flags"] == SERVER["flags"]


def test_the_choice_is_the_best_throughput_within_the_budget_and_the_simplest_on_a_tie():
    one = candidate("a", 1, 2000, [(1, 10.0, 50.0), (8, 20.0, 400.0)])
    two = candidate("b", 2, 2000, [(1, 10.0, 60.0), (8, 20.5, 380.0)])
    slow = candidate("c", 1, 10000, [(1, 9.0, 70.0), (8, 30.0, 900.0)])
    assert tune.choose([one, two, slow], None) is slow
    assert tune.choose([one, two, slow], 500.0) is one  # two is within 3%: one is simpler
    assert tune.choose([one, two, slow], 40.0) is None


def test_measurements_are_read_from_model_analyzers_csv_and_the_variants_configs(tmp_path):
    variants = tmp_path / "variants"
    for name, count in (("ocr_det_config_default", 1), ("ocr_det_config_0", 2)):
        shutil.copytree(REPOSITORY / "ocr_det", variants / name, ignore=shutil.ignore_patterns("1"))
        path = variants / name / "config.pbtxt"
        path.write_text(path.read_text().replace("count: 1", f"count: {count}"))
    (tmp_path / "export" / "results").mkdir(parents=True)
    (tmp_path / "export" / "results" / "metrics-model-inference.csv").write_text(
        "Model,Batch,Concurrency,Model Config Path,Instance Group,Max Batch Size,"
        "Satisfies Constraints,Throughput (infer/sec),p99 Latency (ms)\n"
        "ocr_det,1,4,ocr_det_config_0,2:CPU,8,Yes,3.5,1300.0\n"
        "ocr_det,1,1,ocr_det_config_0,2:CPU,8,Yes,3.0,400.0\n"
        "ocr_det,1,1,ocr_det_config_default,1:CPU,8,Yes,3.9,280.0\n"
        "face_embedding,1,1,face_embedding_config_0,1:CPU,32,Yes,30.0,50.0\n")
    found = tune.read_candidates(tmp_path / "export", variants, "ocr_det")
    assert [(c.config, c.instances, c.levels) for c in found] == [
        ("ocr_det_config_default", 1, ((1, 3.9, 280.0),)),
        ("ocr_det_config_0", 2, ((1, 3.0, 400.0), (4, 3.5, 1300.0)))]


def test_the_choice_is_written_into_the_shipped_config_with_its_comments(tmp_path):
    shutil.copytree(REPOSITORY / "ocr_det", tmp_path / "ocr_det",
                    ignore=shutil.ignore_patterns("1"))
    before = (tmp_path / "ocr_det" / "config.pbtxt").read_text()
    same = tune.shipped_values(tmp_path, "ocr_det")
    assert not tune.apply(tmp_path, "ocr_det", candidate(
        "x", same["instances"], same["delay_us"], [], batch=same["max_batch_size"]))
    assert (tmp_path / "ocr_det" / "config.pbtxt").read_text() == before
    assert tune.apply(tmp_path, "ocr_det", candidate("x", 2, 10000, [], batch=4))
    after = load_config(tmp_path / "ocr_det" / "config.pbtxt")
    assert [g.count for g in after.instance_group] == [2]
    assert after.max_batch_size == 4
    assert after.dynamic_batching.max_queue_delay_microseconds == 10000
    text = (tmp_path / "ocr_det" / "config.pbtxt").read_text()
    assert "# PP-OCRv3 (English) DB text detector." in text
    assert "max_run_batch" in text and "cpu_execution_accelerator" in text


def test_a_summary_table_per_model(tmp_path):
    result = tune.ModelResult("ocr_det", {"instances": 1, "max_batch_size": 8, "delay_us": 2000},
                              [candidate("ocr_det_config_0", 2, 0, [(1, 3.0, 400.0)])])
    result.chosen = result.candidates[0]
    tune.write_summary(tmp_path, [result], Search(concurrency=(1, 4)))
    table = (tmp_path / "README.md").read_text()
    assert "| ocr_det_config_0 **chosen** | 2 | 8 | 0 | 3.0 (400) | - |" in table
    assert (tmp_path / "tune.json").is_file()
