"""`kyc eval ... --candidate PATH`: a version not yet in the repository measured as the
next one, the repository untouched (issue 45: the trained mrz_rec was measured so)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kyc_tools.dev.eval.server import EvalError, versions_on_disk, with_candidate


def repository(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    for model in ("mrz_rec", "ocr_rec"):
        (repo / model / "1").mkdir(parents=True)
        (repo / model / "1" / "model.onnx").write_bytes(b"one")
        (repo / model / "config.pbtxt").write_text(f'name: "{model}"\n')
    return repo


def tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


@pytest.mark.parametrize("as_folder", [True, False])
def test_a_candidate_is_the_next_version_of_a_view_and_the_repository_is_untouched(
        tmp_path, as_folder):
    repo = repository(tmp_path)
    before = tree(repo)
    candidate = tmp_path / "trained"
    candidate.mkdir()
    (candidate / "model.onnx").write_bytes(b"two")
    with with_candidate(repo, "mrz_rec", candidate if as_folder else
                        candidate / "model.onnx") as view:
        assert view != repo and versions_on_disk(view, "mrz_rec") == [1, 2]
        assert (view / "mrz_rec" / "2" / "model.onnx").read_bytes() == b"two"
        assert (view / "mrz_rec" / "1" / "model.onnx").read_bytes() == b"one"
        assert (view / "mrz_rec" / "config.pbtxt").is_file()
        assert versions_on_disk(view, "ocr_rec") == [1]
    assert not view.exists() and tree(repo) == before


def test_without_a_candidate_the_repository_itself_is_measured(tmp_path):
    repo = repository(tmp_path)
    with with_candidate(repo, "mrz_rec", None) as view:
        assert view == repo


def test_a_missing_candidate_or_model_is_a_clear_error(tmp_path):
    repo = repository(tmp_path)
    with pytest.raises(EvalError, match="does not exist"), \
            with_candidate(repo, "mrz_rec", tmp_path / "nope"):
        pass
    with pytest.raises(EvalError, match="no model face_embedding"), \
            with_candidate(repo, "face_embedding", repo / "mrz_rec" / "1"):
        pass


def test_each_measure_names_the_model_whose_versions_it_compares():
    from kyc_tools.dev.eval import MEASURED, antifraud, faces, liveness

    assert MEASURED == {"faces": faces.EMBEDDING, "liveness": liveness.MODEL,
                        "antifraud": antifraud.MODEL}
