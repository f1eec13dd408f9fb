"""`kyc models arcface`: a user's IResNet state_dict -> ONNX -> a face_embedding version.

Every network here is randomly initialised (seeded, with random BatchNorm statistics):
no ArcFace weights ship, and none are downloaded.
"""

from __future__ import annotations

import copy
import os
import stat
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from kyc.pipeline.modelconfig import served_versions, version_dirs
from kyc_export import arcface, cli, convert, synthetic
from kyc_export.errors import ParityError
from kyc_export.iresnet import ARCH_LAYERS, build_iresnet
from kyc_export.parity import sample_images, session
from kyc_tools.assets.fetch import sha256_file
from kyc_tools.cli import main as kyc_main
from kyc_tools.repo.check import check_repository, check_version
from kyc_tools.repo.config import load_config, parse_config
from kyc_tools.repo.config_edit import format_config
from kyc_tools.repo.publish import PublishError

FACE_EMBEDDING_CONFIG = """\
# A face_embedding config like the shipped one (128-d SFace).
name: "face_embedding"
platform: "onnxruntime_onnx"
max_batch_size: 32
input [
  { name: "FACE" data_type: TYPE_UINT8 dims: [ 112, 112, 3 ] }
]
output [
  { name: "EMBEDDING" data_type: TYPE_FP32 dims: [ 128 ] }  # D
]
instance_group [ { count: 1 } ]
# The face-match threshold, chosen for the weights.
parameters [
  { key: "match_threshold" value: { string_value: "0.363" } }
]
dynamic_batching { max_queue_delay_microseconds: 2000 }
"""


@pytest.fixture(scope="module")
def r18() -> torch.nn.Module:
    return arcface.random_backbone("r18", seed=7)


@pytest.fixture(scope="module")
def exported(r18) -> arcface.Exported:
    return arcface.export_arcface(r18, "r18")


@pytest.fixture(scope="module")
def small_512() -> onnx.ModelProto:
    """The served contract at a few kilobytes (mean colour -> 512-d): for publish logic."""
    nodes = [
        helper.make_node("Cast", ["FACE"], ["x"], to=TensorProto.FLOAT),
        helper.make_node("ReduceMean", ["x"], ["mean"], axes=[1, 2], keepdims=0),
        helper.make_node("MatMul", ["mean", "w"], ["raw"]),
        helper.make_node("LpNormalization", ["raw"], ["EMBEDDING"], axis=1, p=2),
    ]
    graph = helper.make_graph(
        nodes,
        "small",
        [helper.make_tensor_value_info("FACE", TensorProto.UINT8, ["N", 112, 112, 3])],
        [helper.make_tensor_value_info("EMBEDDING", TensorProto.FLOAT, ["N", 512])],
        [numpy_helper.from_array(np.linspace(-1, 1, 3 * 512, dtype=np.float32).reshape(3, 512),
                                 "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def write_face_repository(root: Path, config: str = FACE_EMBEDDING_CONFIG) -> Path:
    """A repository with face_embedding version 1: a tiny converted 128-d SFace stand-in."""
    model_dir = root / "face_embedding"
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "config.pbtxt").write_text(config)
    sface = convert.convert_face_embedding(synthetic.sface_model().SerializeToString())
    onnx.save(sface, str(model_dir / "1" / "model.onnx"))
    return root


@pytest.fixture
def face_repository(tmp_path: Path) -> Path:
    return write_face_repository(tmp_path / "repo")


@pytest.fixture(scope="module")
def r18_session(exported) -> ort.InferenceSession:
    return session(exported.model)


def embed(sess: ort.InferenceSession, faces: np.ndarray) -> np.ndarray:
    return sess.run(["EMBEDDING"], {"FACE": faces})[0]


def reference(backbone: torch.nn.Module, faces: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return arcface.ServedArcFace(backbone)(torch.from_numpy(faces)).numpy()


def dims_of(value_info: onnx.ValueInfoProto) -> list[int | str]:
    return [d.dim_param or d.dim_value for d in value_info.type.tensor_type.shape.dim]


# -- architecture -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arch", "keys", "parameters"),
    [("r50", 475, 43_590_848), ("r100", 925, 65_156_160)],
)
def test_iresnet_has_arcface_torch_key_names_key_count_and_parameter_count(
    arch, keys, parameters
):
    with torch.device("meta"):  # shapes only
        net = build_iresnet(arch)
    state = net.state_dict()

    assert len(state) == keys
    assert sum(p.numel() for p in net.parameters()) == parameters
    for key in (
        "conv1.weight",
        "bn1.running_var",
        "prelu.weight",
        "layer1.0.downsample.0.weight",
        "layer1.0.downsample.1.num_batches_tracked",
        f"layer3.{ARCH_LAYERS[arch][2] - 1}.bn3.weight",
        "layer4.2.prelu.weight",
        "bn2.bias",
        "features.running_mean",
    ):
        assert key in state
    assert tuple(state["fc.weight"].shape) == (512, 512 * 7 * 7)


def test_cli_architecture_choices_are_the_iresnet_architectures():
    assert set(cli.ARCFACE_ARCHS) == set(ARCH_LAYERS)


# -- export and parity ------------------------------------------------------------------------


def test_exported_r18_matches_torch_within_1e_4_for_batches_of_1_and_3(exported):
    assert set(exported.parity) == {1, 3}
    assert all(diff <= 1e-4 for diff in exported.parity.values()), exported.parity


def test_exported_model_takes_uint8_nhwc_face_and_gives_512_d_float_embedding(exported):
    model = exported.model
    (face,) = model.graph.input
    (embedding,) = model.graph.output

    assert (face.name, face.type.tensor_type.elem_type) == ("FACE", TensorProto.UINT8)
    assert dims_of(face) == ["N", 112, 112, 3]
    assert (embedding.name, embedding.type.tensor_type.elem_type) == (
        "EMBEDDING",
        TensorProto.FLOAT,
    )
    assert dims_of(embedding) == ["N", 512]
    assert exported.dims == 512


def test_exported_model_has_the_opset_and_ir_version_of_the_shipped_converters(exported):
    onnx.checker.check_model(exported.model, full_check=True)
    assert [(o.domain, o.version) for o in exported.model.opset_import] == [("", 17)]
    assert exported.model.ir_version <= 10


def test_exported_embeddings_are_unit_norm_with_a_dynamic_batch(r18_session, r18):
    faces = sample_images(5, 112, 112, seed=11)

    batched = embed(r18_session, faces)
    singles = np.concatenate([embed(r18_session, face[None]) for face in faces])

    assert batched.shape == (5, 512)
    np.testing.assert_allclose(np.linalg.norm(batched, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(batched, singles, atol=1e-5)
    np.testing.assert_allclose(batched, reference(r18, faces), atol=1e-4)


def test_exported_model_reads_rgb_so_a_bgr_face_gives_another_embedding(r18_session, r18):
    faces = sample_images(2, 112, 112, seed=3)

    bgr = embed(r18_session, np.ascontiguousarray(faces[..., ::-1]))

    assert np.max(np.abs(bgr - reference(r18, faces))) > 1e-2


def test_embeddings_of_different_faces_differ_so_the_random_network_is_not_degenerate(
    r18_session,
):
    a, b = embed(r18_session, sample_images(2, 112, 112, seed=5))

    assert float(a @ b) < 0.99


def test_parity_check_fails_when_the_onnx_model_does_not_compute_what_torch_does(exported, r18):
    changed = copy.deepcopy(r18)
    with torch.no_grad():
        changed.features.running_mean += 1.0

    with pytest.raises(ParityError, match=r"differs from PyTorch by more than 0\.0001"):
        arcface.check_parity(changed, exported.model)


# -- checkpoints -------------------------------------------------------------------------


def test_loading_reports_missing_and_unexpected_keys_by_name(r18):
    state = dict(r18.state_dict())
    del state["fc.weight"]
    state["head.weight"] = torch.zeros(1)

    with pytest.raises(arcface.CheckpointError) as info:
        arcface.load_backbone(state, "r18")
    message = str(info.value)
    assert "1 missing key(s): fc.weight" in message
    assert "1 unexpected key(s): head.weight" in message


def test_loading_an_r34_checkpoint_as_r18_names_the_architecture_it_has():
    with torch.device("meta"):
        state = build_iresnet("r34").state_dict()

    with pytest.raises(arcface.CheckpointError, match=r"\(3, 4, 6, 3\) are those of r34"):
        arcface.load_backbone(state, "r18")


def test_loading_a_tensor_of_the_wrong_shape_fails_with_the_shapes(r18):
    state = dict(r18.state_dict())
    state["bn2.weight"] = torch.ones(10)

    with pytest.raises(arcface.CheckpointError, match=r"size mismatch for bn2\.weight"):
        arcface.load_backbone(state, "r18")


def test_half_precision_weights_are_loaded_as_float32(r18):
    half = {k: v.half() if v.is_floating_point() else v for k, v in r18.state_dict().items()}

    loaded = arcface.load_backbone(half, "r18")

    assert {p.dtype for p in loaded.state_dict().values() if p.is_floating_point()} == {
        torch.float32
    }


def test_data_parallel_module_prefix_is_stripped(r18):
    wrapped = {f"module.{key}": value for key, value in r18.state_dict().items()}

    loaded = arcface.load_backbone(arcface.unwrap_state_dict(wrapped), "r18")

    faces = sample_images(1, 112, 112)
    np.testing.assert_array_equal(reference(loaded, faces), reference(r18, faces))


@pytest.mark.parametrize("key", ["state_dict", "model", "state_dict_backbone"])
def test_state_dict_nested_in_a_training_checkpoint_is_found(r18, tmp_path, key):
    path = tmp_path / "checkpoint.pt"
    torch.save({"epoch": 3, key: r18.state_dict()}, path)

    state = arcface.read_state_dict(path)

    assert state.keys() == r18.state_dict().keys()


def test_a_file_that_holds_no_state_dict_is_refused(tmp_path):
    path = tmp_path / "epoch.pt"
    torch.save({"epoch": 3, "note": "no weights"}, path)

    with pytest.raises(arcface.CheckpointError, match="not a state_dict"):
        arcface.read_state_dict(path)


def test_a_pickled_module_is_refused_without_running_its_code(tmp_path, r18):
    path = tmp_path / "whole_model.pt"
    torch.save(r18, path)  # a pickled nn.Module, not a state_dict

    with pytest.raises(arcface.CheckpointError, match="not a weights-only PyTorch checkpoint"):
        arcface.load_checkpoint(path, "r18")


def test_a_missing_checkpoint_is_one_clear_error(tmp_path):
    with pytest.raises(arcface.CheckpointError, match="no such checkpoint"):
        arcface.load_checkpoint(tmp_path / "absent.pth", "r18")


def test_torch_save_state_dict_then_cli_export_gives_a_model_matching_torch(
    r18, tmp_path, capsys
):
    checkpoint = tmp_path / "backbone.pth"
    torch.save(r18.state_dict(), checkpoint)
    out = tmp_path / "arcface.onnx"

    code = kyc_main(
        ["models", "arcface", "export", "--checkpoint", str(checkpoint), "--arch", "r18",
         "--out", str(out)]
    )

    printed = capsys.readouterr().out
    assert code == 0
    assert "EMBEDDING 512-d" in printed
    assert "batch 1 max|diff|" in printed and "batch 3 max|diff|" in printed
    model = onnx.load(str(out))
    faces = sample_images(2, 112, 112, seed=9)
    np.testing.assert_allclose(embed(session(model), faces), reference(r18, faces), atol=1e-4)
    metadata = {p.key: p.value for p in model.metadata_props}
    assert metadata["kyc.source_sha256"] == sha256_file(checkpoint)
    assert metadata["kyc.arch"] == "iresnet r18"


def test_cli_export_of_a_mismatching_checkpoint_exits_1_with_one_line(r18, tmp_path, capsys):
    checkpoint = tmp_path / "backbone.pth"
    torch.save(r18.state_dict(), checkpoint)

    code = kyc_main(
        ["models", "arcface", "export", "--checkpoint", str(checkpoint), "--arch", "r34",
         "--out", str(tmp_path / "x.onnx")]
    )

    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert len(err) == 1 and "missing key(s)" in err[0] and "are those of r18" in err[0]
    assert not (tmp_path / "x.onnx").exists()


# -- config.pbtxt edits -----------------------------------------------------------------------


def changed_lines(old: str, new: str) -> list[tuple[str, str]]:
    return [(a, b) for a, b in zip(old.splitlines(), new.splitlines(), strict=False) if a != b]


def relaid(text: str) -> str:
    """``text`` as an edit writes it back (through protobuf's text format), unchanged."""
    return format_config(parse_config(text), like=text)


def test_setting_the_output_dims_changes_only_that_value_and_keeps_comments():
    new = arcface.set_output_dims(FACE_EMBEDDING_CONFIG, "EMBEDDING", [512])

    assert changed_lines(relaid(FACE_EMBEDDING_CONFIG), new) == [
        (
            'output { name: "EMBEDDING" data_type: TYPE_FP32 dims: [128] }  # D',
            'output { name: "EMBEDDING" data_type: TYPE_FP32 dims: [512] }  # D',
        )
    ]
    assert len(new.splitlines()) == len(relaid(FACE_EMBEDDING_CONFIG).splitlines())
    assert "# The face-match threshold, chosen for the weights." in new.splitlines()
    expected = parse_config(FACE_EMBEDDING_CONFIG)
    expected.output[0].dims[:] = [512]
    assert parse_config(new) == expected


def test_setting_the_match_threshold_updates_the_existing_entry_in_place():
    new = arcface.set_string_parameter(FACE_EMBEDDING_CONFIG, "match_threshold", "0.28")

    assert changed_lines(relaid(FACE_EMBEDDING_CONFIG), new) == [
        (
            'parameters { key: "match_threshold" value { string_value: "0.363" } }',
            'parameters { key: "match_threshold" value { string_value: "0.28" } }',
        )
    ]


def test_setting_the_match_threshold_adds_the_entry_when_there_is_none():
    text = 'name: "m"\nplatform: "onnxruntime_onnx"\n# the end\n'

    new = arcface.set_string_parameter(text, "match_threshold", "0.3")

    assert new.startswith(text)
    assert parse_config(new).parameters["match_threshold"].string_value == "0.3"


def test_setting_the_version_policy_replaces_the_existing_one():
    text = FACE_EMBEDDING_CONFIG + "version_policy: { latest: { num_versions: 2 } }\n"

    new = arcface.set_version_policy(text, [3])

    assert new == relaid(FACE_EMBEDDING_CONFIG) + "version_policy { specific { versions: [3] } }\n"


def test_editing_the_dims_of_an_output_that_does_not_exist_is_refused():
    with pytest.raises(arcface.ConfigEditError, match="no output named 'LOGITS'"):
        arcface.set_output_dims(FACE_EMBEDDING_CONFIG, "LOGITS", [512])


# -- publish -------------------------------------------------------------------------------


def test_publish_makes_the_512_d_model_the_next_version_and_the_repository_checks_clean(
    face_repository, exported, capsys
):
    config_path = face_repository / "face_embedding" / "config.pbtxt"
    untouched = face_repository / "linked-config.pbtxt"
    os.link(config_path, untouched)  # test repositories hard-link the shipped configs

    result = arcface.publish_arcface(face_repository, exported.model)

    assert (result.version, result.previous_dims, result.dims) == (2, [128], [512])
    assert sorted(p.name for p in version_dirs(face_repository / "face_embedding")) == ["1", "2"]
    text = config_path.read_text()
    assert text == arcface.set_output_dims(FACE_EMBEDDING_CONFIG, "EMBEDDING", [512])
    assert untouched.read_text() == FACE_EMBEDDING_CONFIG
    assert check_repository(face_repository) == []
    assert kyc_main(["repo", "check", str(face_repository)]) == 0
    assert "OK" in capsys.readouterr().out


def test_publish_of_new_dims_warns_that_the_old_threshold_was_chosen_for_the_old_model(
    face_repository, small_512
):
    result = arcface.publish_arcface(face_repository, small_512)

    (warning,) = result.warnings
    assert "match_threshold 0.363 was chosen for the previous 128-d model" in warning
    config = load_config(face_repository / "face_embedding" / "config.pbtxt")
    assert config.parameters["match_threshold"].string_value == "0.363"


def test_publish_with_both_thresholds_sets_them_and_does_not_warn(face_repository, small_512):
    result = arcface.publish_arcface(face_repository, small_512, match_threshold=0.28,
                                     review_threshold=0.2)

    assert result.warnings == []
    config = load_config(face_repository / "face_embedding" / "config.pbtxt")
    assert config.parameters["match_threshold"].string_value == "0.28"
    assert config.parameters["review_threshold"].string_value == "0.2"


def test_publish_with_a_match_threshold_alone_leaves_no_review_band_and_says_so(
        face_repository, small_512):
    result = arcface.publish_arcface(face_repository, small_512, match_threshold=0.28)

    assert result.warnings == ["review_threshold set to the match threshold: no review band; "
                               "choose one on your own pairs and pass --review-threshold"]
    config = load_config(face_repository / "face_embedding" / "config.pbtxt")
    assert config.parameters["review_threshold"].string_value == "0.28"


@pytest.mark.parametrize(("match", "review", "error"), [
    (None, 0.2, "needs its match threshold"), (0.28, 0.3, "at most the match threshold")])
def test_publish_refuses_a_review_threshold_without_or_above_the_match_threshold(
        face_repository, small_512, match, review, error):
    with pytest.raises(arcface.ConfigEditError, match=error):
        arcface.publish_arcface(face_repository, small_512, match_threshold=match,
                                review_threshold=review)


def test_publish_keeps_the_config_file_mode_for_a_server_running_as_another_user(
    face_repository, small_512
):
    config_path = face_repository / "face_embedding" / "config.pbtxt"
    config_path.chmod(0o640)  # neither the umask default nor a private temporary mode

    arcface.publish_arcface(face_repository, small_512)

    assert stat.S_IMODE(config_path.stat().st_mode) == 0o640


def test_publish_never_shows_a_server_a_config_with_a_version_it_does_not_fit(
    face_repository, small_512, monkeypatch
):
    model_dir = face_repository / "face_embedding"
    seen: list[tuple[str, list[str]]] = []

    def snapshot() -> None:
        seen.append(((model_dir / "config.pbtxt").read_text(), os.listdir(model_dir)))
        config = load_config(model_dir / "config.pbtxt")
        served = served_versions(config, version_dirs(model_dir))
        assert served, "a state that serves nothing"
        for version in served:
            assert check_version(config, version, face_repository) == [], seen[-1]

    def replace_then_look(*args, **kwargs):
        replace_file(*args, **kwargs)
        snapshot()

    def publish_then_look(*args, **kwargs):
        published = publish(*args, **kwargs)
        snapshot()
        return published

    replace_file, publish = arcface.replace_file, arcface.publish
    monkeypatch.setattr(arcface, "replace_file", replace_then_look)
    monkeypatch.setattr(arcface, "publish", publish_then_look)

    arcface.publish_arcface(face_repository, small_512, match_threshold=0.3)

    # pinned to version 1, version 2 renamed in, then the new config serving version 2
    assert len(seen) == 3
    assert "specific" in seen[0][0] and "specific" in seen[1][0] and "2" in seen[1][1]
    assert "version_policy" not in seen[2][0]


def test_publish_under_a_policy_serving_all_versions_serves_only_those_that_fit(
    tmp_path, small_512
):
    repo = write_face_repository(
        tmp_path / "repo", FACE_EMBEDDING_CONFIG + "version_policy: { all: {} }\n"
    )

    result = arcface.publish_arcface(repo, small_512, match_threshold=0.3,
                                     review_threshold=0.25)

    config = load_config(repo / "face_embedding" / "config.pbtxt")
    assert list(config.version_policy.specific.versions) == [2]
    assert result.warnings == ["version_policy now serves version(s) [2]; version(s) [1] do "
                               "not fit the new config"]
    assert check_repository(repo) == []


def test_publishing_the_same_dims_again_is_a_plain_publish_that_leaves_the_config_alone(
    face_repository, small_512
):
    arcface.publish_arcface(face_repository, small_512, match_threshold=0.3)
    config_path = face_repository / "face_embedding" / "config.pbtxt"
    before = config_path.read_text()

    result = arcface.publish_arcface(face_repository, small_512)

    assert (result.version, result.config_changed, result.warnings) == (3, False, [])
    assert config_path.read_text() == before
    assert check_repository(face_repository) == []


def test_publish_refuses_a_model_that_does_not_fit_and_changes_nothing(tmp_path, small_512):
    config = FACE_EMBEDDING_CONFIG.replace("TYPE_UINT8", "TYPE_FP32")
    repo = write_face_repository(tmp_path / "repo", config)

    with pytest.raises(PublishError) as info:
        arcface.publish_arcface(repo, small_512)

    assert "input 'FACE' is TYPE_FP32 in the config but TYPE_UINT8" in str(info.value.problems[0])
    assert (repo / "face_embedding" / "config.pbtxt").read_text() == config
    assert sorted(os.listdir(repo / "face_embedding")) == ["1", "config.pbtxt"]


def test_publish_into_a_model_without_versions_writes_the_config_then_the_version(
    tmp_path, small_512
):
    model_dir = tmp_path / "repo" / "face_embedding"
    model_dir.mkdir(parents=True)
    (model_dir / "config.pbtxt").write_text(FACE_EMBEDDING_CONFIG)

    result = arcface.publish_arcface(tmp_path / "repo", small_512, match_threshold=0.3)

    assert result.version == 1
    assert list(load_config(model_dir / "config.pbtxt").output[0].dims) == [512]
    assert check_repository(tmp_path / "repo") == []


def test_publish_refuses_a_match_threshold_that_is_not_a_cosine(face_repository, small_512):
    with pytest.raises(arcface.ConfigEditError, match=r"not a cosine in \[-1, 1\]"):
        arcface.publish_arcface(face_repository, small_512, match_threshold=1.5)
    assert sorted(os.listdir(face_repository / "face_embedding")) == ["1", "config.pbtxt"]


def test_cli_publish_prints_the_new_version_and_the_threshold_warning(
    face_repository, small_512, monkeypatch, capsys
):
    # The export itself is exercised by the round-trip test above: stand in for it here.
    exported = arcface.Exported(small_512, "r18", 512, {1: 0.0, 3: 0.0})
    monkeypatch.setattr(arcface, "export_arcface", lambda *args, **kwargs: exported)

    code = kyc_main(
        ["models", "arcface", "publish", "--random-init", "1", "--arch", "r18",
         "--repository", str(face_repository)]
    )

    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert captured.out.strip() == "2"
    assert "warning: match_threshold 0.363 was chosen" in captured.err
    assert "r18: EMBEDDING 512-d; torch vs onnxruntime batch 1" in captured.err
    assert check_repository(face_repository) == []


def test_cli_publish_into_a_missing_model_exits_1(tmp_path, capsys):
    code = kyc_main(
        ["models", "arcface", "publish", "--random-init", "1", "--arch", "r18",
         "--repository", str(tmp_path)]
    )

    assert code == 1
    assert "no model 'face_embedding'" in capsys.readouterr().err


def test_cli_arcface_needs_a_checkpoint_or_a_random_init_seed(capsys):
    with pytest.raises(SystemExit):
        kyc_main(["models", "arcface", "export", "--arch", "r18", "--out", "x.onnx"])
    assert "one of the arguments --checkpoint --random-init is required" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["r50", "r100"])
def test_exported_r50_and_r100_match_torch_within_1e_4(arch):
    result = arcface.export_arcface(arcface.random_backbone(arch, seed=0), arch)

    assert all(diff <= 1e-4 for diff in result.parity.values()), result.parity
