"""kyc_export.minifasnet: MiniFASNet anti-spoofing checkpoints -> face_antispoof ONNX.

Every network here is randomly initialised (seeded, with random BatchNorm statistics):
no anti-spoofing weights ship, and none are downloaded.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto

torch = pytest.importorskip("torch")

from kyc_export import minifasnet  # noqa: E402 - after the skip: the tests need torch
from kyc_export.errors import ConversionError, ParityError  # noqa: E402
from kyc_export.parity import sample_images, session  # noqa: E402

ARCHS = minifasnet.ARCHS
SE_ARCHS = ("MiniFASNetV1SE", "MiniFASNetV2SE")


@pytest.fixture(scope="module")
def v2() -> torch.nn.Module:
    return minifasnet.random_model("MiniFASNetV2", seed=3)


@pytest.fixture(scope="module", params=ARCHS)
def exported(request) -> tuple[str, torch.nn.Module, onnx.ModelProto]:
    net = minifasnet.random_model(request.param, seed=11)
    return request.param, net, minifasnet.to_onnx(net)


def torch_probs(net: torch.nn.Module, crops: np.ndarray) -> np.ndarray:
    """Softmax of ``net`` on RGB uint8 crops prepared here as the reference prepares
    its cv2 (BGR) frames: channels reversed, CHW, float, no scaling."""
    x = torch.from_numpy(np.ascontiguousarray(crops[..., ::-1].transpose(0, 3, 1, 2))).float()
    with torch.no_grad():
        return torch.softmax(net(x), dim=1).numpy()


def run(model: onnx.ModelProto, crops: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    probs, real = session(model).run(["PROBS", "REAL"], {"CROP": crops})
    return probs, real


def dims_of(value_info: onnx.ValueInfoProto) -> list[int | str]:
    return [d.dim_param or d.dim_value for d in value_info.type.tensor_type.shape.dim]


# -- names ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "arch", "scale", "size"),
    [
        ("2.7_80x80_MiniFASNetV2.pth", "MiniFASNetV2", 2.7, 80),
        ("4_0_0_80x80_MiniFASNetV1SE.pth", "MiniFASNetV1SE", 4.0, 80),
        ("org_1_80x80_MiniFASNetV1.pth", "MiniFASNetV1", None, 80),
        ("/models/1_112x112_MiniFASNetV2SE.pth", "MiniFASNetV2SE", 1.0, 112),
    ],
)
def test_checkpoint_names_give_the_architecture_scale_and_size(name, arch, scale, size):
    assert minifasnet.parse_name(name) == minifasnet.CheckpointInfo(arch, scale, size)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("model.pth", "does not follow the convention"),
        ("MiniFASNetV2.pth", "does not follow the convention"),
        ("2.7_80x80_ResNet50.pth", "unknown architecture 'ResNet50'"),
        ("2.7_80x60_MiniFASNetV2.pth", "80x60 is not supported"),
        ("big_80x80_MiniFASNetV2.pth", "'big' is not a crop scale"),
        ("0_80x80_MiniFASNetV1.pth", "not positive"),
    ],
)
def test_names_outside_the_convention_are_refused_with_a_clear_message(name, message):
    with pytest.raises(ValueError, match=message):
        minifasnet.parse_name(name)


def test_the_module_imports_and_parses_names_without_torch():
    code = (
        "import sys; sys.modules['torch'] = None\n"  # any `import torch` now fails
        "from kyc_export import minifasnet as m\n"
        "print(m.parse_name('2.7_80x80_MiniFASNetV2.pth').scale, m.INPUT_SIZE, len(m.ARCHS))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)

    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2.7", "80", "4"]


# -- architectures -------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("batch", [1, 2])
def test_every_architecture_builds_and_gives_3_logits_per_80x80_crop(arch, batch):
    net = minifasnet.build(arch)

    with torch.no_grad():
        out = net(torch.rand(batch, 3, 80, 80) * 255)

    assert tuple(out.shape) == (batch, 3)
    assert not net.training


@pytest.mark.parametrize(
    ("arch", "keys", "parameters_m", "parameters"),
    # Parameter counts in millions, as the reference's comments give them for V1/V2, and
    # exact (they pin every channel width of its keep_dict lists).
    [("MiniFASNetV1", 334, 0.41, 414354), ("MiniFASNetV2", 334, 0.43, 434560),
     ("MiniFASNetV1SE", 370, 0.43, 433586), ("MiniFASNetV2SE", 370, 0.45, 453792)],
)
def test_architectures_have_the_reference_key_names_and_sizes(arch, keys, parameters_m,
                                                              parameters):
    state = minifasnet.build(arch).state_dict()
    shapes = {k: tuple(v.shape) for k, v in state.items()}
    widths = 13 if arch.startswith("MiniFASNetV2") else 26  # keep[8] of '1.8M_' / '1.8M'
    learned = sum(v.numel() for k, v in state.items()
                  if "running" not in k and "num_batches" not in k)

    assert len(state) == keys
    assert round(learned / 1e6, 2) == parameters_m
    assert learned == parameters
    assert shapes["conv1.conv.weight"] == (32, 3, 3, 3)
    assert shapes["conv2_dw.conv.weight"] == (32, 1, 3, 3)
    assert shapes["conv_23.conv_dw.conv.weight"] == (103, 1, 3, 3)
    assert shapes["conv_3.model.1.conv.conv.weight"] == (widths, 64, 1, 1)
    assert shapes["conv_4.model.5.project.bn.running_var"] == (128,)
    assert shapes["conv_45.conv.prelu.weight"] == (308,)
    assert shapes["conv_6_dw.conv.weight"] == (512, 1, 5, 5)  # get_kernel(80, 80)
    assert shapes["linear.weight"] == (128, 512)
    assert shapes["bn.running_mean"] == (128,)
    assert shapes["prob.weight"] == (3, 128)
    se_keys = sorted({k.split(".se_module.")[0] for k in state if ".se_module." in k})
    if arch in SE_ARCHS:  # the last block of each residual stage, reduction 4
        assert se_keys == ["conv_3.model.3", "conv_4.model.5", "conv_5.model.1"]
        assert shapes["conv_4.model.5.se_module.fc1.weight"] == (32, 128, 1, 1)
    else:
        assert se_keys == []


def test_the_last_kernel_follows_the_input_size():
    net = minifasnet.build("MiniFASNetV1", size=112)

    with torch.no_grad():
        out = net(torch.rand(2, 3, 112, 112) * 255)

    assert tuple(net.state_dict()["conv_6_dw.conv.weight"].shape) == (512, 1, 7, 7)
    assert tuple(out.shape) == (2, 3)


def test_an_unknown_architecture_is_refused():
    with pytest.raises(ValueError, match="unknown architecture 'MiniFASNetV3'"):
        minifasnet.build("MiniFASNetV3")


def test_random_models_are_seeded_and_their_probabilities_are_not_saturated(v2):
    again = minifasnet.random_model("MiniFASNetV2", seed=3)
    other = minifasnet.random_model("MiniFASNetV2", seed=4)
    crops = sample_images(8, 80, 80, seed=1)

    probs = torch_probs(v2, crops)

    np.testing.assert_array_equal(torch_probs(again, crops), probs)
    assert np.max(np.abs(torch_probs(other, crops) - probs)) > 1e-2
    # BatchNorm statistics were randomised around those of real inputs: the softmax
    # is not stuck at 0/1, so parity on it compares numbers, not constants.
    assert np.mean((probs > 1e-3) & (probs < 1 - 1e-3)) > 0.5
    assert np.std(probs[:, 1]) > 0.02
    assert not torch.equal(v2.bn.running_mean, torch.zeros(128))


# -- checkpoints ---------------------------------------------------------------------------


def same_outputs(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    crops = sample_images(2, 80, 80, seed=5)
    return np.array_equal(torch_probs(a, crops), torch_probs(b, crops))


def test_a_saved_state_dict_loads_strictly_with_its_name_telling_arch_and_scale(v2, tmp_path):
    path = tmp_path / "2.7_80x80_MiniFASNetV2.pth"
    torch.save(v2.state_dict(), path)

    net, info = minifasnet.load_checkpoint(path)

    assert info == minifasnet.CheckpointInfo("MiniFASNetV2", 2.7, 80)
    assert not net.training
    assert same_outputs(net, v2)


def test_a_data_parallel_module_prefix_is_stripped(v2, tmp_path):
    path = tmp_path / "2.7_80x80_MiniFASNetV2.pth"
    torch.save({f"module.{k}": v for k, v in v2.state_dict().items()}, path)

    net, _ = minifasnet.load_checkpoint(path)

    assert same_outputs(net, v2)


def test_a_state_dict_nested_under_state_dict_is_found(v2, tmp_path):
    path = tmp_path / "4_0_0_80x80_MiniFASNetV2.pth"
    state = {f"module.{k}": v for k, v in v2.state_dict().items()}
    torch.save({"epoch": 7, "state_dict": state}, path)

    net, info = minifasnet.load_checkpoint(path)

    assert info.scale == 4.0
    assert same_outputs(net, v2)


def test_an_explicit_arch_accepts_a_file_named_outside_the_convention(v2, tmp_path):
    path = tmp_path / "antispoof.pth"
    torch.save(v2.state_dict(), path)

    net, info = minifasnet.load_checkpoint(path, "MiniFASNetV2")

    assert info == minifasnet.CheckpointInfo("MiniFASNetV2", None, 80)
    assert same_outputs(net, v2)
    with pytest.raises(ValueError, match="does not follow the convention"):
        minifasnet.load_checkpoint(path)


def test_a_missing_key_is_refused_with_its_name(v2, tmp_path):
    state = dict(v2.state_dict())
    del state["conv_4.model.2.project.bn.running_var"]
    state["head.weight"] = torch.zeros(1)
    path = tmp_path / "2.7_80x80_MiniFASNetV2.pth"
    torch.save(state, path)

    with pytest.raises(minifasnet.CheckpointError) as info:
        minifasnet.load_checkpoint(path)

    message = str(info.value)
    assert message.startswith(str(path))
    assert "1 missing key(s): conv_4.model.2.project.bn.running_var" in message
    assert "1 unexpected key(s): head.weight" in message


def test_batchnorm_counters_absent_from_an_old_checkpoint_are_not_required(v2, tmp_path):
    state = {k: v for k, v in v2.state_dict().items() if not k.endswith("num_batches_tracked")}
    path = tmp_path / "2.7_80x80_MiniFASNetV2.pth"
    torch.save(state, path)

    net, _ = minifasnet.load_checkpoint(path)

    assert same_outputs(net, v2)


def test_a_checkpoint_of_another_architecture_is_refused_naming_the_one_it_fits(v2, tmp_path):
    path = tmp_path / "2.7_80x80_MiniFASNetV2.pth"
    torch.save(v2.state_dict(), path)

    with pytest.raises(minifasnet.CheckpointError, match=r"missing key.*se_module.*those of "
                       r"MiniFASNetV2"):
        minifasnet.load_checkpoint(path, "MiniFASNetV2SE")
    with pytest.raises(minifasnet.CheckpointError,
                       match=r"(?s)shapes are those of MiniFASNetV2\).*size mismatch"):
        minifasnet.load_checkpoint(path, "MiniFASNetV1")


def test_a_pickled_module_is_refused_without_running_its_code(v2, tmp_path):
    path = tmp_path / "2.7_80x80_MiniFASNetV2.pth"
    torch.save(v2, path)  # the whole nn.Module pickled, not a state_dict

    with pytest.raises(minifasnet.CheckpointError, match="not a weights-only PyTorch checkpoint"):
        minifasnet.load_checkpoint(path)


def test_files_that_hold_no_state_dict_or_none_at_all_are_refused(tmp_path):
    empty = tmp_path / "2.7_80x80_MiniFASNetV2.pth"
    torch.save({"epoch": 3, "note": "no weights"}, empty)

    with pytest.raises(minifasnet.CheckpointError, match="entries are not tensors: epoch, note"):
        minifasnet.load_checkpoint(empty)
    with pytest.raises(minifasnet.CheckpointError, match="no such checkpoint"):
        minifasnet.load_checkpoint(tmp_path / "1_80x80_MiniFASNetV1.pth")


# -- ONNX export and parity ----------------------------------------------------------------


def test_every_architecture_matches_torch_within_1e_4_for_batches_of_1_and_3(exported):
    arch, net, model = exported

    parity = minifasnet.check_parity(net, model)

    assert set(parity) == {1, 3}
    assert all(diff <= 1e-4 for diff in parity.values()), (arch, parity)


def test_the_exported_model_takes_uint8_rgb_crops_and_gives_probs_and_real(exported):
    _, _, model = exported
    (crop,) = model.graph.input
    probs, real = model.graph.output

    onnx.checker.check_model(model, full_check=True)
    assert (crop.name, crop.type.tensor_type.elem_type, dims_of(crop)) == (
        "CROP", TensorProto.UINT8, ["N", 80, 80, 3])
    assert (probs.name, probs.type.tensor_type.elem_type, dims_of(probs)) == (
        "PROBS", TensorProto.FLOAT, ["N", 3])
    assert (real.name, real.type.tensor_type.elem_type, dims_of(real)) == (
        "REAL", TensorProto.FLOAT, ["N"])
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 17)]
    assert {p.key: p.value for p in model.metadata_props}["kyc.model"] == "face_antispoof"


def test_real_is_probs_of_class_1_and_probs_are_a_softmax_with_a_dynamic_batch(exported):
    _, net, model = exported
    crops = sample_images(5, 80, 80, seed=21)

    probs, real = run(model, crops)
    singles = np.concatenate([run(model, crop[None])[0] for crop in crops])

    assert probs.shape == (5, 3) and real.shape == (5,)
    np.testing.assert_array_equal(real, probs[:, 1])
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(probs, singles, atol=1e-6)
    np.testing.assert_allclose(probs, torch_probs(net, crops), atol=1e-4)


def test_the_graph_swaps_rgb_to_bgr_and_does_not_scale_the_pixels(v2):
    model = minifasnet.to_onnx(v2)
    crops = sample_images(3, 80, 80, seed=8)
    probs, _ = run(model, crops)
    rgb_fed = torch.from_numpy(np.ascontiguousarray(crops.transpose(0, 3, 1, 2))).float()
    with torch.no_grad():
        as_rgb = torch.softmax(v2(rgb_fed), dim=1).numpy()
        as_unit = torch.softmax(v2(minifasnet.reference_input(crops) / 255.0), dim=1).numpy()

    np.testing.assert_allclose(probs, torch_probs(v2, crops), atol=1e-4)
    assert np.max(np.abs(probs - as_rgb)) > 1e-2  # a missing swap would show
    assert np.max(np.abs(probs - as_unit)) > 1e-2  # so would a division by 255


def test_the_parity_check_fails_when_onnx_does_not_compute_what_torch_does(v2):
    model = minifasnet.to_onnx(v2)
    changed = minifasnet.random_model("MiniFASNetV2", seed=3)
    with torch.no_grad():
        changed.bn.running_mean += 0.5

    with pytest.raises(ParityError, match=r"differs from PyTorch by more than 0\.0001"):
        minifasnet.check_parity(changed, model)


def test_a_network_with_other_than_3_classes_is_not_exported():
    with pytest.raises(ConversionError, match=r"contract is 3 classes.*has 4"):
        minifasnet.to_onnx(minifasnet.build("MiniFASNetV2SE", num_classes=4))


def test_export_of_a_checkpoint_records_its_scale_and_source(v2, tmp_path):
    path = tmp_path / "2.7_80x80_MiniFASNetV2.pth"
    torch.save(v2.state_dict(), path)

    result = minifasnet.export("MiniFASNetV2", checkpoint=path)

    assert (result.arch, result.scale, set(result.parity)) == ("MiniFASNetV2", 2.7, {1, 3})
    assert all(diff <= 1e-4 for diff in result.parity.values())
    metadata = {p.key: p.value for p in result.model.metadata_props}
    assert metadata["kyc.crop_scale"] == "2.7"
    assert metadata["kyc.arch"] == "MiniFASNetV2"
    assert metadata["kyc.source"] == f"checkpoint {path.name}"
    crops = sample_images(2, 80, 80, seed=4)
    np.testing.assert_allclose(run(result.model, crops)[0], torch_probs(v2, crops), atol=1e-4)


def test_export_of_a_random_network_has_no_scale_and_needs_exactly_one_source(tmp_path):
    result = minifasnet.export("MiniFASNetV1SE", random_init=2)

    assert (result.arch, result.scale) == ("MiniFASNetV1SE", None)
    metadata = {p.key: p.value for p in result.model.metadata_props}
    assert metadata["kyc.source"] == "random init seed 2" and "kyc.crop_scale" not in metadata
    with pytest.raises(ValueError, match="exactly one of checkpoint and random_init"):
        minifasnet.export("MiniFASNetV1SE")
    with pytest.raises(ValueError, match="exactly one of checkpoint and random_init"):
        minifasnet.export("MiniFASNetV1SE", checkpoint=Path("x.pth"), random_init=1)
