"""Installing into <repository>/<model>/1 by staging and rename; detecting stale installs."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from kyc_export import install as installer
from kyc_export.errors import InstallError
from kyc_tools.assets.fetch import sha256_bytes

CURRENT = {"kyc.source_sha256": "a" * 64, "kyc.converter_version": "3"}


def _model(tag: str = "new", extra: dict[str, bytes] | None = None, **meta: str) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Identity", ["X"], ["Y"])],
        tag,
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 2])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    props = {**CURRENT, **meta}
    for name, data in (extra or {}).items():
        props[f"kyc.extra_file.{name}.sha256"] = sha256_bytes(data)
    helper.set_model_props(model, props)
    return model


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    path = tmp_path / "repo" / "tiny"
    path.mkdir(parents=True)
    (path / "config.pbtxt").write_text('name: "tiny"\n')
    return path


def _installed_graph_name(model_dir: Path) -> str:
    return onnx.load(str(model_dir / "1" / "model.onnx")).graph.name


def test_install_stages_inside_the_model_folder_and_renames_into_place(model_dir, monkeypatch):
    renames = []
    real_rename = os.rename
    monkeypatch.setattr(
        os, "rename", lambda a, b: (renames.append((Path(a), Path(b))), real_rename(a, b))
    )

    final = installer.install(model_dir, _model(), {"dict.txt": b"a\n"})

    assert final == model_dir / "1"
    assert [(a.parent, a.name.startswith(".staging-"), b) for a, b in renames] == [
        (model_dir, True, model_dir / "1")  # never in the repository root, where Triton looks
    ]
    assert sorted(p.name for p in final.iterdir()) == ["dict.txt", "model.onnx"]
    assert sorted(p.name for p in model_dir.iterdir()) == ["1", "config.pbtxt"]


def test_install_replaces_an_existing_version_and_deletes_the_old_copy(model_dir):
    installer.install(model_dir, _model("old"), {"stale.txt": b"x"})

    installer.install(model_dir, _model("new"))

    assert _installed_graph_name(model_dir) == "new"
    assert not (model_dir / "1" / "stale.txt").exists()
    assert sorted(p.name for p in model_dir.iterdir()) == ["1", "config.pbtxt"]


def test_install_puts_the_previous_version_back_when_the_swap_fails(model_dir, monkeypatch):
    installer.install(model_dir, _model("old"))
    real_rename = os.rename

    def failing_rename(src, dst):
        if Path(src).name.startswith(".staging-"):
            raise OSError(28, "No space left on device")
        return real_rename(src, dst)

    monkeypatch.setattr(os, "rename", failing_rename)

    with pytest.raises(InstallError, match="tiny: cannot install"):
        installer.install(model_dir, _model("new"))
    assert _installed_graph_name(model_dir) == "old"
    assert sorted(p.name for p in model_dir.iterdir()) == ["1", "config.pbtxt"]


def test_install_replaces_the_files_where_the_folder_cannot_be_renamed(model_dir, monkeypatch):
    """Docker's overlay file system: a folder a COPY brought cannot be renamed (EXDEV)."""
    installer.install(model_dir, _model("old"))
    real_rename = os.rename

    def overlay_rename(src, dst):
        if Path(src).name == "1":
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        return real_rename(src, dst)

    monkeypatch.setattr(os, "rename", overlay_rename)

    final = installer.install(model_dir, _model("new"), {"dict.txt": b"a"})

    assert final == model_dir / "1"
    assert _installed_graph_name(model_dir) == "new"
    assert (final / "dict.txt").read_bytes() == b"a"
    assert sorted(p.name for p in model_dir.iterdir()) == ["1", "config.pbtxt"]


def test_installed_version_folder_is_readable_by_other_users(model_dir):
    old_umask = os.umask(0o022)
    try:
        final = installer.install(model_dir, _model())
    finally:
        os.umask(old_umask)
    assert final.stat().st_mode & 0o777 == 0o755


def test_install_removes_leftovers_of_an_interrupted_run(model_dir):
    (model_dir / ".old-deadbeef").mkdir()
    stale = model_dir / ".staging-cafe"
    stale.mkdir()
    os.utime(stale, (0, 0))

    installer.install(model_dir, _model())

    assert sorted(p.name for p in model_dir.iterdir()) == ["1", "config.pbtxt"]


def test_is_up_to_date_compares_source_sha256_and_converter_version(model_dir):
    assert not installer.is_up_to_date(model_dir, CURRENT)  # nothing installed yet
    installer.install(model_dir, _model())

    assert installer.is_up_to_date(model_dir, CURRENT)
    assert not installer.is_up_to_date(model_dir, {**CURRENT, "kyc.converter_version": "4"})
    assert not installer.is_up_to_date(model_dir, {**CURRENT, "kyc.source_sha256": "b" * 64})


def test_is_up_to_date_notices_a_modified_or_missing_extra_file(model_dir):
    installer.install(model_dir, _model(extra={"dict.txt": b"a\n"}), {"dict.txt": b"a\n"})
    assert installer.is_up_to_date(model_dir, CURRENT)

    (model_dir / "1" / "dict.txt").write_bytes(b"edited\n")
    assert not installer.is_up_to_date(model_dir, CURRENT)

    (model_dir / "1" / "dict.txt").unlink()
    assert not installer.is_up_to_date(model_dir, CURRENT)


def test_is_up_to_date_treats_a_corrupt_model_file_as_stale(model_dir):
    (model_dir / "1").mkdir()
    (model_dir / "1" / "model.onnx").write_bytes(b"\x00garbage")

    assert not installer.is_up_to_date(model_dir, CURRENT)
