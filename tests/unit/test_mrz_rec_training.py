"""`kyc models mrz-rec`: the recipe that rebuilds mrz_rec version 2, its export and the
shipped file's pin (the full recipe takes about 20 minutes: here, a few pages)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from kyc.document.mrz_rec import MRZ_CLASS_COUNT
from kyc_testing import SHIPPED_REPOSITORY

torch = pytest.importorskip("torch")
mrz_rec = pytest.importorskip("kyc_export.mrz_rec")
TINY = dict(pages=3, crops_per_line=1, epochs=1, batch=4, learning_rate=1e-3)


def test_a_seed_gives_the_same_weights_and_the_onnx_graph_serves_them():
    first, _ = mrz_rec.train(mrz_rec.Recipe(seed=3, **TINY), progress=lambda line: None)
    second, trained = mrz_rec.train(mrz_rec.Recipe(seed=3, **TINY), progress=lambda line: None)
    for (name, a), b in zip(first.state_dict().items(), second.state_dict().values(),
                            strict=True):
        assert torch.equal(a, b), name
    model = mrz_rec.to_onnx(second, mrz_rec.Recipe(seed=3, **TINY), trained)
    assert mrz_rec.parity(second, model) <= mrz_rec.PARITY_TOLERANCE
    meta = {p.key: p.value for p in model.metadata_props}
    assert "seed 3" in meta["kyc.recipe"] and meta["kyc.stride"] == "4"
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    probs = session.run(["PROBS"], {"IMAGES": np.full((2, 48, 320, 3), 127, np.uint8)})[0]
    assert probs.shape == (2, 320 // mrz_rec.STRIDE, MRZ_CLASS_COUNT)
    np.testing.assert_allclose(probs.sum(axis=2), 1.0, atol=1e-5)


def test_the_pinned_recipe_is_the_manifests():
    recipe = mrz_rec.Recipe.pinned()
    assert recipe.seed and recipe.pages >= 1000 and recipe.epochs >= 1
    assert mrz_rec.Recipe.pinned(seed=7).seed == 7


def test_the_shipped_version_is_the_file_the_manifest_pins(tmp_path):
    path = mrz_rec.check_shipped(SHIPPED_REPOSITORY)
    assert path == SHIPPED_REPOSITORY / "mrz_rec" / "2" / "model.onnx"
    copy = tmp_path / "mrz_rec" / "2"
    copy.mkdir(parents=True)
    shutil.copyfile(path, copy / "model.onnx")
    mrz_rec.check_shipped(tmp_path)
    with (copy / "model.onnx").open("ab") as handle:
        handle.write(b"\0")
    with pytest.raises(mrz_rec.ConversionError, match="not the trained model"):
        mrz_rec.check_shipped(tmp_path)
    (copy / "model.onnx").unlink()
    with pytest.raises(mrz_rec.ConversionError, match="missing"):
        mrz_rec.check_shipped(tmp_path)


def test_kyc_models_mrz_rec_train_writes_a_model_the_repository_check_accepts(tmp_path,
                                                                              capsys):
    """The command, on 2 pages for 1 epoch: the ONNX file it writes passes the checks a
    dropped version folder gets (its tensors against mrz_rec's config)."""
    from kyc_tools.cli import main
    from kyc_tools.repo.check import check_model

    out = tmp_path / "model.onnx"
    assert main(["models", "mrz-rec", "train", "--pages", "2", "--epochs", "1",
                 "--out", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    repo = tmp_path / "repo"
    shutil.copytree(SHIPPED_REPOSITORY / "mrz_rec", repo / "mrz_rec",
                    ignore=shutil.ignore_patterns("[0-9]*"))
    (repo / "mrz_rec" / "1").mkdir()
    shutil.copyfile(out, repo / "mrz_rec" / "1" / "model.onnx")
    _, problems = check_model(repo / "mrz_rec", root=repo)
    assert problems == []
