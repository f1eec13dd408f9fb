"""`kyc repo publish`: staged, checked, precompiled, renamed into the next version."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from kyc_testing import UNSAFE_ENTRIES, write_echo_version
from kyc_tools.cli import main
from kyc_tools.repo.publish import PublishError, publish


def entries(model_dir: Path) -> list[str]:
    return sorted(p.name for p in model_dir.iterdir() if p.is_dir())


def test_publish_takes_the_next_version_number_and_prints_it(tiny_repository, tmp_path, capsys):
    src = write_echo_version(tmp_path / "src", scale=2.0)
    assert main(["repo", "publish", "echo", str(src), "--repository", str(tiny_repository)]) == 0
    assert capsys.readouterr().out.strip() == "2"
    published = tiny_repository / "echo" / "2" / "model.py"
    assert published.read_text() == (src / "model.py").read_text()


def test_publish_precompiles_python_so_the_first_import_writes_nothing(tiny_repository, tmp_path):
    src = write_echo_version(tmp_path / "src")
    published = publish(tiny_repository, "echo", src)
    cached = list((published.path / "__pycache__").glob("model.cpython-*.pyc"))
    assert len(cached) == 1


def test_publish_leaves_no_staging_folder_behind(tiny_repository, tmp_path):
    publish(tiny_repository, "echo", write_echo_version(tmp_path / "src"))
    assert entries(tiny_repository / "echo") == ["1", "2"]


def test_publish_refuses_a_broken_version_and_leaves_the_repository_unchanged(
    tiny_repository, tmp_path
):
    src = tmp_path / "broken"
    src.mkdir()
    (src / "model.onnx").write_bytes(b"\x00garbage")
    with pytest.raises(PublishError) as info:
        publish(tiny_repository, "double", src)
    assert "double version 2 refused" in str(info.value)
    assert str(info.value.problems[0]).startswith(
        "repo/double/2/model.onnx: not a valid ONNX model"
    )
    assert entries(tiny_repository / "double") == ["1"]


def test_publish_cli_prints_the_problems_and_exits_1_when_refused(
    tiny_repository, tmp_path, capsys
):
    src = tmp_path / "empty"
    src.mkdir()
    code = main(["repo", "publish", "echo", str(src), "--repository", str(tiny_repository)])
    assert code == 1
    err = capsys.readouterr().err
    assert "repo/echo/2/model.py: missing" in err
    assert "echo version 2 refused" in err


def test_publish_with_force_puts_a_broken_version_in_and_returns_its_problems(
    tiny_repository, tmp_path
):
    src = tmp_path / "broken"
    src.mkdir()
    (src / "model.onnx").write_bytes(b"garbage")
    published = publish(tiny_repository, "double", src, force=True)
    assert published.version == 2
    assert published.problems
    assert (tiny_repository / "double" / "2" / "model.onnx").read_bytes() == b"garbage"


def test_publish_accepts_a_single_file_as_the_version_content(
    tiny_repository, tmp_path, onnx_factory
):
    model = onnx_factory(tmp_path / "model.onnx", op="Mul")
    published = publish(tiny_repository, "double", model)
    assert entries(published.path) == []
    assert (published.path / "model.onnx").is_file()


def test_publish_refuses_an_unknown_model(tiny_repository, tmp_path):
    with pytest.raises(PublishError, match="no model 'nope'"):
        publish(tiny_repository, "nope", write_echo_version(tmp_path / "src"))


def test_publish_does_not_copy_bytecode_or_hidden_files_from_the_source(tiny_repository, tmp_path):
    src = write_echo_version(tmp_path / "src")
    (src / "__pycache__").mkdir()
    (src / "__pycache__" / "stale.pyc").write_bytes(b"old")
    (src / ".DS_Store").write_bytes(b"x")
    published = publish(tiny_repository, "echo", src)
    assert not (published.path / ".DS_Store").exists()
    assert not (published.path / "__pycache__" / "stale.pyc").exists()


def test_concurrent_publishers_get_distinct_versions(tiny_repository, tmp_path):
    src = write_echo_version(tmp_path / "src")
    versions: list[int] = []

    def worker() -> None:
        versions.append(publish(tiny_repository, "echo", src).version)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(versions) == [2, 3, 4, 5]


@pytest.mark.parametrize("place", UNSAFE_ENTRIES.values(), ids=UNSAFE_ENTRIES.keys())
def test_publish_refuses_a_link_or_a_fifo_and_leaves_the_repository_unchanged(
    tiny_repository, tmp_path, place
):
    src = write_echo_version(tmp_path / "src")
    place(src)
    with pytest.raises(PublishError, match="only folders and regular files"):
        publish(tiny_repository, "echo", src)
    assert entries(tiny_repository / "echo") == ["1"]


@pytest.mark.parametrize("model", ["../echo", "/etc", "..", "echo/1"])
def test_publish_refuses_a_model_name_that_is_a_path(tiny_repository, tmp_path, model):
    with pytest.raises(PublishError, match="one plain name"):
        publish(tiny_repository, model, write_echo_version(tmp_path / "src"))
