"""`kyc repo seed`: a shared volume gets the image's repository once, atomically."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest

from kyc_tools.cli import main
from kyc_tools.repo import seed as seed_module
from kyc_tools.repo.seed import SeedError, seed


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts}


def test_seed_copies_the_repository_and_precompiles_its_python(tiny_repository, tmp_path):
    dest = tmp_path / "volume" / "models"
    assert seed(tiny_repository, dest) is True
    assert tree(dest) == tree(tiny_repository)
    assert list((dest / "echo" / "1" / "__pycache__").glob("model.cpython-*.pyc"))
    assert [p.name for p in dest.parent.iterdir()] == ["models"]  # no staging left


def test_seed_leaves_a_repository_already_there_untouched(tiny_repository, tmp_path, capsys):
    dest = tmp_path / "models"
    (dest / "echo" / "7").mkdir(parents=True)
    (dest / "echo" / "7" / "model.py").write_text("# published later\n")
    assert main(["repo", "seed", str(tiny_repository), str(dest)]) == 0
    assert "already holds a repository: left as it is" in capsys.readouterr().out
    assert tree(dest) == {"echo/7/model.py": b"# published later\n"}


def test_seed_fills_an_empty_destination_folder(tiny_repository, tmp_path):
    dest = tmp_path / "models"
    dest.mkdir()  # e.g. made by the kubelet for a subPath mount
    assert seed(tiny_repository, dest) is True
    assert tree(dest) == tree(tiny_repository)


def test_two_seeders_racing_leave_exactly_one_whole_copy(tiny_repository, tmp_path, monkeypatch):
    dest = tmp_path / "models"
    copied = threading.Barrier(2)
    real_copytree = shutil.copytree

    def copy_then_wait(*args, **kwargs):  # both copies finish before either renames
        out = real_copytree(*args, **kwargs)
        copied.wait(timeout=10)
        return out

    monkeypatch.setattr(seed_module.shutil, "copytree", copy_then_wait)
    results: list[bool] = []
    threads = [threading.Thread(target=lambda: results.append(seed(tiny_repository, dest)))
               for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(results) == [False, True]
    assert tree(dest) == tree(tiny_repository)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["models", "repo"]


def test_seed_refuses_an_unsound_source_and_writes_nothing(tiny_repository, tmp_path, capsys):
    (tiny_repository / "echo" / "1" / "model.py").unlink()
    dest = tmp_path / "models"
    with pytest.raises(SeedError, match="is not a sound repository"):
        seed(tiny_repository, dest)
    assert not dest.exists()
    assert main(["repo", "seed", str(tiny_repository), str(dest)]) == 1
    assert "kyc repo seed:" in capsys.readouterr().err
