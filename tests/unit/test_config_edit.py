"""kyc_tools.repo.config_edit: config.pbtxt edited through Triton's ModelConfig schema, written
back with protobuf's text_format, the comments kept next to what they describe."""

from __future__ import annotations

from collections import Counter

import pytest

from kyc_testing import SHIPPED_REPOSITORY
from kyc_tools.repo import config_edit
from kyc_tools.repo.config import ModelConfig, parse_config
from kyc_tools.repo.config_edit import (
    ConfigEditError,
    edit_config,
    format_config,
    set_output_dims,
    set_string_parameter,
    set_version_policy,
)

SHIPPED = sorted(SHIPPED_REPOSITORY.glob("*/config.pbtxt"))


def comment_lines(text: str) -> Counter[str]:
    return Counter(line.strip() for line in text.splitlines() if line.strip().startswith("#"))


def relaid(text: str) -> str:
    """``text`` written back unchanged (what every edit starts from)."""
    return format_config(parse_config(text), like=text)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.parent.name)
def test_every_shipped_config_round_trips_with_the_same_message_and_all_its_comments(path):
    text = path.read_text(encoding="utf-8")

    new = relaid(text)

    assert parse_config(new) == parse_config(text)
    assert comment_lines(new) == comment_lines(text)
    assert max(len(line) for line in new.splitlines() if not line.startswith("#")) <= 100
    assert relaid(new) == new  # written once, the layout is stable: no churn on re-edits


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.parent.name)
def test_an_edit_of_a_shipped_config_changes_only_what_was_asked(path):
    text = path.read_text(encoding="utf-8")

    new = set_version_policy(text, [2, 1])

    expected = parse_config(text)
    expected.version_policy.specific.versions.extend([1, 2])
    assert parse_config(new) == expected
    assert comment_lines(new) == comment_lines(text)
    # an existing policy is replaced where it is; a new one ends the file
    assert new == relaid(text) + "version_policy { specific { versions: [1, 2] } }\n"


def test_an_edit_that_changes_nothing_returns_the_text_byte_for_byte():
    text = (SHIPPED_REPOSITORY / "face_embedding" / "config.pbtxt").read_text()

    assert set_string_parameter(text, "match_threshold", "0.48") == text
    assert set_output_dims(text, "EMBEDDING", [128]) == text


def test_values_are_written_exactly():
    text = (
        'name: "m"\n'
        "max_batch_size: 8\n"
        'input { name: "A" data_type: TYPE_FP32 dims: [ -1, 3 ] }\n'
        "sequence_batching { max_sequence_idle_microseconds: 18446744073709551615\n"
        "  direct { minimum_slot_utilization: 0.363 } }\n"
        'parameters { key: "ws" value: { string_value: "1073741824" } }\n'
        'parameters { key: "t" value: { string_value: "0.363" } }\n'
        'parameters { key: "u" value: { string_value: "caf\\303\\251 \\"q\\"" } }\n'
        'optimization { execution_accelerators { gpu_execution_accelerator: [ { name: "tensorrt"'
        ' parameters { key: "max_workspace_size_bytes" value: "1073741824" } } ] } }\n'
    )

    new = set_string_parameter(text, "new", "x")

    added = 'parameters { key: "new" value { string_value: "x" } }'
    assert parse_config(new) == parse_config(text + added)
    assert "dims: [-1, 3]" in new
    assert "max_sequence_idle_microseconds: 18446744073709551615" in new
    assert "minimum_slot_utilization: 0.363" in new
    assert 'string_value: "1073741824"' in new and 'string_value: "0.363"' in new
    assert 'string_value: "café \\"q\\""' in new  # as_utf8: readable, quotes escaped


def test_a_comment_stays_next_to_the_element_it_describes():
    text = """\
# header
name: "m"  # the name
input [
  { name: "A" data_type: TYPE_FP32 dims: [ 1 ] },
  # B is optional
  { name: "B" data_type: TYPE_FP32 dims: [ 2 ] optional: true }
]
parameters [
  { key: "a" value: { string_value: "1" } },
  # c: the third
  { key: "c" value: { string_value: "3" } },
  { key: "b" value: { string_value: "2" } }
  # the end of the parameters
]
sequence_batching {
  # idle time
  max_sequence_idle_microseconds: 5
}
# the end
"""

    new = set_string_parameter(text, "d", "4")

    assert new == """\
# header
name: "m"  # the name
input { name: "A" data_type: TYPE_FP32 dims: [1] }
# B is optional
input { name: "B" data_type: TYPE_FP32 dims: [2] optional: true }
parameters { key: "a" value { string_value: "1" } }
# c: the third
parameters { key: "c" value { string_value: "3" } }
parameters { key: "b" value { string_value: "2" } }
# the end of the parameters
parameters { key: "d" value { string_value: "4" } }
# idle time
sequence_batching { max_sequence_idle_microseconds: 5 }
# the end
"""


def test_a_long_element_is_split_and_its_trailing_comment_goes_above_it():
    long_name = "x" * 90
    text = f'name: "m"\ninput [ {{ name: "{long_name}" data_type: TYPE_FP32 dims: [ 1 ] }} ]  # t\n'

    new = edit_config(text, lambda c: c.input[0].dims.append(3))

    assert new == f"""\
name: "m"
# t
input {{
  name: "{long_name}"
  data_type: TYPE_FP32
  dims: [1, 3]
}}
"""


def test_scalars_the_text_wrote_at_their_default_are_written_again():
    text = (SHIPPED_REPOSITORY / "liveness_sequence" / "config.pbtxt").read_text()

    new = set_string_parameter(text, "max_sessions", "8")

    assert "control { kind: CONTROL_SEQUENCE_START bool_false_true: [false, true] }" in new
    assert 'parameters { key: "antispoof_model" value { string_value: "" } }' in new
    assert "CONTROL_SEQUENCE_START" not in format_config(parse_config(text))  # text_format's


def test_the_comments_of_a_removed_element_go_with_the_next_one():
    text = '# about A\ninput { name: "A" data_type: TYPE_FP32 dims: [ 1 ] }\nmax_batch_size: 4\n'

    new = edit_config(text, lambda c: c.ClearField("input"))

    assert new == "# about A\nmax_batch_size: 4\n"


def test_an_edit_whose_text_would_not_read_back_as_asked_is_refused(monkeypatch):
    text = (SHIPPED_REPOSITORY / "face_embedding" / "config.pbtxt").read_text()
    monkeypatch.setattr(config_edit, "format_config", lambda config, like, explicit: like)

    with pytest.raises(ConfigEditError, match="changed more than asked"):
        set_string_parameter(text, "match_threshold", "0.5")


def test_a_text_that_does_not_parse_is_refused():
    with pytest.raises(ConfigEditError, match=r"config\.pbtxt"):
        set_version_policy('name: "m"\ninput [ { name: "A" ', [1])


def test_an_empty_version_list_serves_no_version_rather_than_the_default():
    new = set_version_policy('name: "m"\n', [])

    assert parse_config(new).version_policy.WhichOneof("policy_choice") == "specific"
    assert ModelConfig().version_policy.WhichOneof("policy_choice") is None
