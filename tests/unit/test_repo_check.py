"""`kyc repo check`: a sound repository passes; each broken one gets one clear line."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from onnx import TensorProto

from kyc_tools.cli import main
from kyc_tools.repo.check import check_repository


def messages(repo: Path) -> list[str]:
    return [str(p) for p in check_repository(repo)]


def set_config(repo: Path, model: str, old: str, new: str) -> None:
    path = repo / model / "config.pbtxt"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def test_check_passes_on_a_sound_repository_with_onnx_python_and_ensemble(tiny_repository):
    assert check_repository(tiny_repository) == []


def test_check_cli_exits_0_and_says_ok_on_a_sound_repository(tiny_repository, capsys):
    assert main(["repo", "check", str(tiny_repository)]) == 0
    assert "OK: 3 models" in capsys.readouterr().out


def test_check_reports_a_config_input_name_the_onnx_model_does_not_have(tiny_repository):
    set_config(tiny_repository, "double", 'name: "X"', 'name: "INPUT"')
    assert messages(tiny_repository) == [
        "repo/double/1/model.onnx: input 'INPUT' is not an input of the model (model inputs: X)",
        "repo/double/1/model.onnx: model input 'X' is missing from the config",
        # the ensemble that feeds double's old input name is caught too
        "repo/pipe/config.pbtxt: step 1 (double): 'X' is not an input of double (inputs: INPUT)",
        "repo/pipe/config.pbtxt: step 1 (double): input 'INPUT' of double is not mapped",
    ]


def test_check_reports_a_missing_model_py_naming_the_wedge_risk(tiny_repository):
    (tiny_repository / "echo" / "1" / "model.py").unlink()
    assert messages(tiny_repository) == [
        "repo/echo/1/model.py: missing: version folder has no model.py "
        "(a poll-mode server wedges on such a folder)"
    ]


def test_check_reports_a_non_numeric_version_folder(tiny_repository):
    shutil.copytree(tiny_repository / "double" / "1", tiny_repository / "double" / "v2")
    assert messages(tiny_repository) == [
        "repo/double/v2: version folder 'v2' is not a number (Triton ignores it)"
    ]


def test_check_cli_prints_one_line_per_problem_and_exits_1(tiny_repository, capsys):
    (tiny_repository / "echo" / "1" / "model.py").unlink()
    (tiny_repository / "double" / "latest").mkdir()
    assert main(["repo", "check", str(tiny_repository)]) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 2
    assert any("echo/1/model.py: missing" in line for line in out)
    assert any("double/latest: version folder 'latest' is not a number" in line for line in out)


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        pytest.param("TYPE_FP32 dims: [ 2 ] } ]\noutput", "TYPE_UINT8 dims: [ 2 ] } ]\noutput",
                     "input 'X' is TYPE_UINT8 in the config but TYPE_FP32 in the model",
                     id="a_dtype_mismatch"),
        pytest.param('name: "Y" data_type: TYPE_FP32 dims: [ 2 ]',
                     'name: "Y" data_type: TYPE_FP32 dims: [ 3 ]',
                     "output 'Y' dim 0 is 3 in the config but 2 in the model",
                     id="dims_that_disagree"),
    ],
)
def test_check_reports_a_config_tensor_that_disagrees_with_the_onnx_model(
        tiny_repository, old, new, message):
    set_config(tiny_repository, "double", old, new)
    assert messages(tiny_repository) == [f"repo/double/1/model.onnx: {message}"]


def test_check_reports_a_fixed_batch_dimension_when_max_batch_size_is_set(
    tiny_repository, onnx_factory
):
    onnx_factory(tiny_repository / "double" / "1" / "model.onnx", shape=(4, 2))
    found = messages(tiny_repository)
    assert any("input 'X' has a fixed first dimension 4" in m for m in found)


def test_check_reports_an_onnx_file_that_is_not_onnx(tiny_repository):
    (tiny_repository / "double" / "1" / "model.onnx").write_bytes(b"not a model at all")
    (line,) = messages(tiny_repository)
    assert line.startswith("repo/double/1/model.onnx: not a valid ONNX model")


def test_check_reports_a_python_syntax_error_with_its_line(tiny_repository):
    (tiny_repository / "echo" / "1" / "model.py").write_text("def broken(:\n")
    (line,) = messages(tiny_repository)
    assert line.startswith("repo/echo/1/model.py: Python syntax error at line 1")


def test_check_reports_a_config_that_does_not_parse(tiny_repository):
    (tiny_repository / "echo" / "config.pbtxt").write_text("max_batch_size: eight\n")
    (line,) = messages(tiny_repository)
    assert line.startswith("repo/echo/config.pbtxt: not a valid model config")


def test_check_reports_a_hidden_folder_in_the_repository_root(tiny_repository):
    (tiny_repository / ".staging-x").mkdir()
    (line,) = messages(tiny_repository)
    assert "Triton loads it as a model" in line


def test_check_ignores_hidden_staging_folders_inside_a_model(tiny_repository):
    (tiny_repository / "double" / ".staging-abc").mkdir()
    assert check_repository(tiny_repository) == []


def test_check_reports_an_ensemble_step_on_a_missing_model(tiny_repository):
    shutil.rmtree(tiny_repository / "echo")
    assert messages(tiny_repository) == [
        "repo/pipe/config.pbtxt: step 2 (echo): model 'echo' is not in the repository"
    ]


def test_check_reports_an_ensemble_mapping_to_an_unknown_tensor(tiny_repository):
    set_config(tiny_repository, "pipe", 'key: "IN" value: "doubled"', 'key: "IN" value: "dubled"')
    found = messages(tiny_repository)
    assert found == [
        "repo/pipe/config.pbtxt: step 2 (echo): tensor 'dubled' is neither an ensemble input "
        "nor produced by a step"
    ]


def test_check_reports_an_ensemble_key_that_is_not_a_step_input(tiny_repository):
    set_config(tiny_repository, "pipe", 'key: "IN" value: "doubled"', 'key: "INN" value: "doubled"')
    found = messages(tiny_repository)
    assert "repo/pipe/config.pbtxt: step 2 (echo): 'INN' is not an input of echo (inputs: IN)" \
        in found
    assert "repo/pipe/config.pbtxt: step 2 (echo): input 'IN' of echo is not mapped" in found


def test_check_reports_a_model_without_any_version_folder(tiny_repository):
    shutil.rmtree(tiny_repository / "pipe" / "1")
    assert messages(tiny_repository) == ["repo/pipe: no numeric version folder"]


def test_check_reports_a_folder_name_that_differs_from_the_config_name(tiny_repository):
    set_config(tiny_repository, "echo", 'name: "echo"', 'name: "echo2"')
    assert messages(tiny_repository) == [
        "repo/echo/config.pbtxt: name 'echo2' differs from its folder 'echo'"
    ]


TRT = """
optimization { execution_accelerators { gpu_execution_accelerator: [ {
  name: "tensorrt"
  parameters { key: "precision_mode" value: "FP16" }
  parameters { key: "trt_profile_min_shapes" value: "X:1x2" }
  parameters { key: "trt_profile_opt_shapes" value: "X:4x2" }
  parameters { key: "trt_profile_max_shapes" value: "X:%s" }
} ] } }
"""


def test_check_accepts_a_tensorrt_profile_that_covers_max_batch_size(tiny_repository):
    with open(tiny_repository / "double" / "config.pbtxt", "a") as f:
        f.write(TRT % "8x2")
    assert check_repository(tiny_repository) == []


@pytest.mark.parametrize(
    ("max_shape", "expected"),
    [
        ("4x2", "TensorRT max profile batch 4 for 'X' does not cover max_batch_size 8"),
        ("8x3", "trt_profile_max_shapes for 'X' dim 0 is 3, the config fixes it to 2"),
        ("8", "trt_profile_max_shapes for 'X' has rank 1, expected 2"),
    ],
)
def test_check_reports_a_tensorrt_profile_that_does_not_fit_the_config(
    tiny_repository, max_shape, expected
):
    with open(tiny_repository / "double" / "config.pbtxt", "a") as f:
        f.write(TRT % max_shape)
    assert f"repo/double/config.pbtxt: {expected}" in messages(tiny_repository)


def test_check_reports_a_float64_model_configured_as_fp32(tiny_repository, onnx_factory):
    onnx_factory(tiny_repository / "double" / "1" / "model.onnx", elem_type=TensorProto.DOUBLE)
    found = messages(tiny_repository)
    assert any("'X' is TYPE_FP32 in the config but TYPE_FP64 in the model" in m for m in found)


def add_wider_double_version(repo: Path, onnx_factory) -> None:
    """double version 2 takes and gives 3 values, and the config now says so."""
    onnx_factory(repo / "double" / "2" / "model.onnx", shape=("batch", 3))
    for tensor in ("X", "Y"):
        set_config(repo, "double", f'name: "{tensor}" data_type: TYPE_FP32 dims: [ 2 ]',
                   f'name: "{tensor}" data_type: TYPE_FP32 dims: [ 3 ]')
    set_config(repo, "pipe", "dims: [ 2 ]", "dims: [ 3 ]")
    set_config(repo, "echo", "dims: [ 2 ]", "dims: [ 3 ]")


def test_check_compares_only_the_versions_the_default_version_policy_serves(
    tiny_repository, onnx_factory
):
    add_wider_double_version(tiny_repository, onnx_factory)
    # version 1 (2 values) no longer fits, but Triton only loads the latest version
    assert check_repository(tiny_repository) == []


def test_check_compares_every_version_a_version_policy_of_all_serves(
    tiny_repository, onnx_factory
):
    add_wider_double_version(tiny_repository, onnx_factory)
    with open(tiny_repository / "double" / "config.pbtxt", "a") as f:
        f.write("version_policy: { all: {} }\n")
    assert messages(tiny_repository) == [
        "repo/double/1/model.onnx: input 'X' dim 0 is 3 in the config but 2 in the model",
        "repo/double/1/model.onnx: output 'Y' dim 0 is 3 in the config but 2 in the model",
    ]


def test_check_compares_the_versions_a_specific_version_policy_names(
    tiny_repository, onnx_factory
):
    add_wider_double_version(tiny_repository, onnx_factory)
    with open(tiny_repository / "double" / "config.pbtxt", "a") as f:
        f.write("version_policy: { specific: { versions: [ 1 ] } }\n")
    assert [m for m in messages(tiny_repository) if "double/2" in m] == []
    assert len([m for m in messages(tiny_repository) if "double/1" in m]) == 2


def test_check_still_requires_the_model_file_of_a_version_it_does_not_serve(
    tiny_repository, onnx_factory
):
    add_wider_double_version(tiny_repository, onnx_factory)
    (tiny_repository / "double" / "1" / "model.onnx").unlink()
    assert messages(tiny_repository) == [
        "repo/double/1/model.onnx: missing: version folder has no model.onnx"
    ]


def test_check_reports_a_python_model_parameter_naming_a_missing_model(tmp_path):
    from kyc_testing import SHIPPED_REPOSITORY, copy_tree

    for model in ("face_detector", "face_preprocess"):  # kyc_intake left out
        copy_tree(SHIPPED_REPOSITORY / model, tmp_path / model)
    problems = [str(p) for p in check_repository(tmp_path)]
    assert any("face_preprocess/config.pbtxt: parameter limits_model names model 'kyc_intake'"
               in p for p in problems), problems


def test_check_refuses_a_fixed_liveness_challenge(tiny_repository):
    """kyc.liveness's `challenge` parameter is for `kyc eval liveness`'s private server:
    served, every session would get the same challenge and a replayed clip would pass."""
    set_config(tiny_repository, "echo", 'name: "echo"',
               'name: "echo"\nparameters { key: "challenge" value: { string_value: "left" } }')
    (message,) = messages(tiny_repository)
    assert message.startswith("repo/echo/config.pbtxt: parameter 'challenge' fixes every")


def test_check_cli_names_a_python_models_config_that_breaks_its_steps_contract(tmp_path,
                                                                               capsys):
    from kyc_testing import SHIPPED_REPOSITORY

    repo = tmp_path / "repo"
    for model in ("ocr_preprocess", "kyc_intake"):  # the step and the model it reads
        shutil.copytree(SHIPPED_REPOSITORY / model, repo / model)
    assert main(["repo", "check", str(repo)]) == 0
    capsys.readouterr()
    set_config(repo, "ocr_preprocess", 'name: "ATTESTATION"', 'name: "PROOF"')
    assert main(["repo", "check", str(repo)]) == 1
    assert capsys.readouterr().out.splitlines() == [
        "ocr_preprocess/config.pbtxt: outputs ['CANVAS', 'PROOF', 'SCALE'] != declared "
        "['ATTESTATION', 'CANVAS', 'SCALE']"]
