"""face_antispoof's config, built as Triton's ModelConfig message and written with
protobuf's text format (no torch)."""

from __future__ import annotations

import pytest

from kyc_export.antispoof import config_text, model_config
from kyc_tools.repo.config import parse_config

# The config the hand-written template gave (its meaning, not its spelling).
TEMPLATE_MEANING = """
name: "NAME"
platform: "onnxruntime_onnx"
max_batch_size: 32
input [ { name: "CROP" data_type: TYPE_UINT8 dims: [ SIZE, SIZE, 3 ] } ]
output [
  { name: "PROBS" data_type: TYPE_FP32 dims: [ 3 ] },
  { name: "REAL" data_type: TYPE_FP32 dims: [ 1 ] }
]
instance_group [ { count: 1 } ]
dynamic_batching { max_queue_delay_microseconds: 2000 }
"""
CASES = [("face_antispoof", 2.7, 80), ("face_antispoof", 4.0, 80), ("my_pad", 1.0, 128)]


def _template(name: str, size: int) -> str:
    return TEMPLATE_MEANING.replace("NAME", name).replace("SIZE", str(size))


@pytest.mark.parametrize(("name", "scale", "size"), CASES)
def test_the_written_config_means_what_the_template_did(name, scale, size):
    assert parse_config(config_text(name, scale, size)) == parse_config(_template(name, size))


@pytest.mark.parametrize(("name", "scale", "size"), CASES)
def test_the_written_config_reads_back_as_the_message_it_was_written_from(name, scale, size):
    assert parse_config(config_text(name, scale, size)) == model_config(name, size)


def test_the_header_comment_names_the_crop_scale_size_and_who_calls_the_model():
    text = config_text("face_antispoof", 2.7, 80)
    header = text[: text.index('name: "face_antispoof"')]
    assert all(line.startswith("# ") for line in header.splitlines())
    assert "enlarged 2.7 times" in header and "resized to 80x80" in header
    assert "liveness_sequence calls it" in header
