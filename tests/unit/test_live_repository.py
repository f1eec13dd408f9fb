"""kyc_tools.operator.live: hand-dropped folders reach the live repository only complete and
checked; refusals, rollbacks, config edits, new models and pinned sessions."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kyc_testing import UNSAFE_ENTRIES, tiny_onnx, write_echo_version
from kyc_tools.operator.live import PIN_SETTLE_S, LiveRepository, live_config_text, scan
from kyc_tools.repo.config import load_config

QUIET = 2.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def live(tiny_repository: Path, tmp_path: Path, clock: Clock) -> LiveRepository:
    repo = LiveRepository(tiny_repository, tmp_path / "live" / "models",
                          tmp_path / "live" / "staging", quiet_s=QUIET, clock=clock)
    assert repo.sync() == []  # the seed: everything sound, nothing to say
    return repo


def settle(live: LiveRepository, clock: Clock, states=None, sessions=None) -> list[str]:
    """Two passes a quiet period apart (a drop seen, then taken): the event kinds."""
    kinds = [e.kind for e in live.sync(states, sessions)]
    clock.now += QUIET + 0.1
    return kinds + [e.kind for e in live.sync(states, sessions)]


def policy(live: LiveRepository, model: str) -> list[int]:
    config = load_config(live.live / model / "config.pbtxt")
    return list(config.version_policy.specific.versions)


def versions(live: LiveRepository, model: str) -> list[str]:
    return sorted(p.name for p in (live.live / model).iterdir() if p.is_dir()
                  and p.name.isdigit())


def test_the_seed_copies_every_model_with_an_exact_version_policy(live):
    assert sorted(p.name for p in live.live.iterdir()) == ["double", "echo", "pipe"]
    assert policy(live, "double") == [1] and policy(live, "echo") == [1]
    # Python files precompiled there, never in the edited repository
    assert list((live.live / "echo" / "1" / "__pycache__").glob("*.pyc"))
    assert not (live.source / "echo" / "1" / "__pycache__").exists()
    assert list(live.staging.iterdir()) == []


def test_a_folder_is_taken_only_once_it_stopped_changing(live, clock):
    tiny_onnx(live.source / "double" / "2" / "model.onnx")
    assert [e.kind for e in live.sync()] == []
    assert live.status()["double"]["waiting"] == {"2": "being copied"}
    clock.now += QUIET / 2
    assert live.sync() == [] and versions(live, "double") == ["1"]
    clock.now += QUIET
    assert [e.kind for e in live.sync()] == ["taken"]
    assert versions(live, "double") == ["1", "2"] and policy(live, "double") == [2]
    assert live.status()["double"]["waiting"] == {}


def test_a_file_still_growing_restarts_the_quiet_period(live, clock):
    target = live.source / "double" / "2" / "model.onnx"
    tiny_onnx(target)
    data = target.read_bytes()
    target.write_bytes(data[:10])
    live.sync()
    clock.now += QUIET + 0.1
    target.write_bytes(data)  # the copy went on
    assert live.sync() == []
    clock.now += QUIET + 0.1
    assert [e.kind for e in live.sync()] == ["taken"]


def test_an_rsync_temporary_file_holds_the_folder_back(live, clock):
    folder = live.source / "double" / "2"
    tiny_onnx(folder / ".model.onnx.Ab3dEf")
    assert settle(live, clock) == []
    assert "copy in progress" in live.status()["double"]["waiting"]["2"]
    (folder / ".model.onnx.Ab3dEf").rename(folder / "model.onnx")
    assert settle(live, clock) == ["taken"]
    assert sorted(p.name for p in (live.live / "double" / "2").iterdir()) == ["model.onnx"]


def test_a_truncated_onnx_is_refused_with_its_reason_and_taken_once_fixed(live, clock):
    target = tiny_onnx(live.source / "double" / "2" / "model.onnx")
    good = target.read_bytes()
    target.write_bytes(good[: len(good) // 2])
    assert settle(live, clock) == ["refused"]
    refused = live.status()["double"]["refused"][0]
    assert refused["version"] == 2 and "not a valid ONNX model" in refused["reason"]
    assert versions(live, "double") == ["1"] and policy(live, "double") == [1]
    assert live.sync() == []  # said once, not on every pass
    target.write_bytes(good)  # fixed in place
    assert settle(live, clock) == ["taken"]
    assert policy(live, "double") == [2] and live.status()["double"]["refused"] == []


def test_tensor_names_that_disagree_with_the_config_are_refused(live, clock):
    tiny_onnx(live.source / "double" / "2" / "model.onnx", output_name="Z")
    assert settle(live, clock) == ["refused"]
    assert "Z" in live.status()["double"]["refused"][0]["reason"]


def test_a_python_folder_without_model_py_is_never_seen_by_triton(live, clock):
    folder = live.source / "echo" / "7"
    folder.mkdir()
    (folder / "notes.txt").write_text("copy in progress")
    assert settle(live, clock) == ["refused"]
    assert "no model.py" in live.status()["echo"]["refused"][0]["reason"]
    assert versions(live, "echo") == ["1"]
    write_echo_version(folder, scale=3.0)
    assert settle(live, clock) == ["taken"]
    assert versions(live, "echo") == ["1", "7"] and policy(live, "echo") == [7]


def test_a_copy_deleted_half_way_leaves_nothing_waiting(live, clock):
    tiny_onnx(live.source / "double" / "2" / "model.onnx")
    live.sync()
    shutil.rmtree(live.source / "double" / "2")
    assert settle(live, clock) == [] and live.status()["double"]["waiting"] == {}


def test_deleting_the_newest_version_rolls_back(live, clock):
    write_echo_version(live.source / "echo" / "2")
    settle(live, clock)
    shutil.rmtree(live.source / "echo" / "2")
    assert [e.kind for e in live.sync()] == ["removed"]
    assert policy(live, "echo") == [1] and versions(live, "echo") == ["1"]


def test_a_config_edit_is_checked_against_the_versions_it_serves(live, clock):
    config = live.source / "double" / "config.pbtxt"
    text = config.read_text()
    config.write_text(text.replace('name: "Y"', 'name: "W"'))
    assert settle(live, clock) == ["config_refused"]
    assert "W" in live.status()["double"]["refused"][0]["reason"]
    assert 'name: "Y"' in (live.live / "double" / "config.pbtxt").read_text()
    config.write_text(text.replace("max_queue_delay_microseconds: 1000",
                                   "max_queue_delay_microseconds: 2000"))
    assert settle(live, clock) == ["config"]
    served = load_config(live.live / "double" / "config.pbtxt")
    assert served.dynamic_batching.max_queue_delay_microseconds == 2000
    assert list(served.version_policy.specific.versions) == [1]


def test_a_config_edit_that_breaks_an_ensemble_is_refused(live, clock):
    config = live.source / "echo" / "config.pbtxt"
    config.write_text(config.read_text().replace('name: "IN"', 'name: "INPUT"'))
    assert settle(live, clock) == ["config_refused"]
    assert "pipe" in live.status()["echo"]["refused"][0]["reason"]


def test_a_new_model_folder_is_taken_whole(live, clock):
    shutil.copytree(live.source / "double", live.source / "triple")
    cfg = live.source / "triple" / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace('"double"', '"triple"'))
    assert settle(live, clock) == ["model"]
    assert versions(live, "triple") == ["1"] and policy(live, "triple") == [1]
    shutil.rmtree(live.source / "triple")
    assert [e.kind for e in live.sync()] == ["model_removed"]
    assert not (live.live / "triple").exists()


def test_a_new_ensemble_wired_to_a_missing_model_is_refused(live, clock):
    shutil.copytree(live.source / "pipe", live.source / "pipe2")
    cfg = live.source / "pipe2" / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace('"pipe"', '"pipe2"').replace('"echo"', '"nope"'))
    assert settle(live, clock) == ["model_refused"]
    assert "nope" in live.status()["pipe2"]["refused"][0]["reason"]
    assert not (live.live / "pipe2").exists()


def test_a_version_triton_fails_to_load_leaves_the_previous_one_serving(live, clock):
    write_echo_version(live.source / "echo" / "2")
    settle(live, clock)
    assert policy(live, "echo") == [2]
    clock.now += 5
    states = {("echo", 1): ("READY", ""),
              ("echo", 2): ("UNAVAILABLE", "ImportError: no module named 'nope'")}
    events = live.sync(states)
    assert [e.kind for e in events] == ["load_refused"]
    assert "ImportError" in events[0].reason
    assert policy(live, "echo") == [1]
    assert live.status()["echo"]["load_refused"] == [2]
    assert live.sync(states) == []  # not tried again until the folder changes
    write_echo_version(live.source / "echo" / "2", scale=5.0)
    assert settle(live, clock, states={("echo", 1): ("READY", "")}) == ["taken"]
    assert policy(live, "echo") == [2]


def test_a_loaded_version_reports_how_long_after_its_copy_it_served(live, clock):
    write_echo_version(live.source / "echo" / "2")
    settle(live, clock)
    clock.now += 4
    events = live.sync({("echo", 1): ("READY", ""), ("echo", 2): ("READY", "")})
    assert [e.kind for e in events] == ["loaded"]
    assert events[0].after_s == pytest.approx(QUIET + 0.1 + 4)


def make_stateful(live: LiveRepository, clock: Clock) -> None:
    """echo with sequence batching (an edited config, taken and loaded)."""
    cfg = live.source / "echo" / "config.pbtxt"
    cfg.write_text(cfg.read_text() + "sequence_batching { max_sequence_idle_microseconds: "
                   "5000000 }\n")
    assert settle(live, clock) == ["config"]
    clock.now += 5
    assert [e.kind for e in live.sync({("echo", 1): ("READY", "")})] == ["loaded"]


def test_a_stateful_model_keeps_the_version_its_sessions_started_on(live, clock):
    make_stateful(live, clock)
    write_echo_version(live.source / "echo" / "2")
    states = {("echo", 1): ("READY", "")}
    open_sessions = {("echo", 1): 2.0}
    assert settle(live, clock, states, open_sessions) == ["taken", "pinned"]
    assert policy(live, "echo") == [1, 2]
    states[("echo", 2)] = ("READY", "")
    clock.now += 3.5
    assert [e.kind for e in live.sync(states, open_sessions)] == ["loaded"]
    assert policy(live, "echo") == [1, 2]  # its sessions are still open
    open_sessions[("echo", 1)] = 0.0
    assert live.sync(states, open_sessions) == []  # a START may still be on its way
    clock.now += 2.0
    open_sessions[("echo", 1)] = 1.0  # it was: queued, now counted
    assert live.sync(states, open_sessions) == []
    open_sessions[("echo", 1)] = 0.0
    assert live.sync(states, open_sessions) == []
    clock.now += PIN_SETTLE_S
    assert [e.kind for e in live.sync(states, open_sessions)] == ["unpinned"]
    assert policy(live, "echo") == [2]
    clock.now += 5
    assert live.sync(states, open_sessions) == []  # version 2 counted as loaded once


def test_a_pin_ends_after_the_longest_session_even_without_figures(live, clock):
    make_stateful(live, clock)
    write_echo_version(live.source / "echo" / "2")
    states = {("echo", 1): ("READY", ""), ("echo", 2): ("READY", "")}
    settle(live, clock, states)
    assert policy(live, "echo") == [1, 2]
    clock.now += 5.1
    assert "unpinned" in [e.kind for e in live.sync(states)]
    assert policy(live, "echo") == [2]


def test_scan_sees_every_change_and_ignores_bytecode(tmp_path):
    folder = write_echo_version(tmp_path / "v")
    before = scan(folder)
    (folder / "__pycache__").mkdir()
    (folder / "__pycache__" / "model.cpython-311.pyc").write_bytes(b"x")
    assert scan(folder).signature[1:] == before.signature[1:]
    (folder / "model.py").write_text("# changed\n")
    assert scan(folder).signature != before.signature
    assert scan(folder).busy is None
    (folder / "weights.bin.part").write_bytes(b"")
    assert "copy in progress" in scan(folder).busy


def test_live_config_text_names_exactly_the_versions(tiny_repository):
    config = load_config(tiny_repository / "double" / "config.pbtxt")
    text = live_config_text(config, [3, 1])
    assert list(load_config_text(text).version_policy.specific.versions) == [1, 3]
    assert load_config_text(text).dynamic_batching.max_queue_delay_microseconds == 1000


def load_config_text(text: str):
    from kyc_tools.repo.config import parse_config

    return parse_config(text)


def test_a_model_without_a_sound_version_is_refused_at_the_seed_with_its_ensemble(
    tiny_repository, tmp_path, clock
):
    (tiny_repository / "echo" / "1" / "model.py").unlink()
    repo = LiveRepository(tiny_repository, tmp_path / "live" / "models",
                          tmp_path / "live" / "staging", quiet_s=QUIET, clock=clock)
    said = {(e.model, e.kind) for e in repo.sync()}
    assert said == {("echo", "refused"), ("echo", "model_refused"), ("pipe", "model_refused")}
    assert sorted(p.name for p in repo.live.iterdir()) == ["double"]


def test_a_folder_written_to_while_it_was_copied_is_not_taken(live, clock, monkeypatch):
    target = tiny_onnx(live.source / "double" / "2" / "model.onnx")
    live.sync()
    clock.now += QUIET + 0.1
    copy_out = live._copy_out

    def copy_then_write(src, *parts):
        copied = copy_out(src, *parts)
        target.write_bytes(target.read_bytes()[:100])  # the copy went on meanwhile
        return copied

    monkeypatch.setattr(live, "_copy_out", copy_then_write)
    assert live.sync() == [] and versions(live, "double") == ["1"]
    assert live.status()["double"]["waiting"] == {"2": "being copied"}
    assert list(live.staging.iterdir()) == []


def test_what_is_served_is_the_copy_that_was_checked(live, clock):
    tiny_onnx(live.source / "double" / "2" / "model.onnx")
    assert settle(live, clock) == ["taken"]
    served = (live.live / "double" / "2" / "model.onnx").read_bytes()
    assert served == (live.source / "double" / "2" / "model.onnx").read_bytes()


def wider(live: LiveRepository) -> None:
    """double's config edited for 3 values instead of 2."""
    config = live.source / "double" / "config.pbtxt"
    config.write_text(config.read_text().replace("dims: [ 2 ]", "dims: [ 3 ]"))


def test_a_config_edit_and_the_version_that_fits_it_are_taken_together(live, clock):
    """As `kyc models arcface` ships a 512-d embedding: neither fits alone."""
    wider(live)
    tiny_onnx(live.source / "double" / "2" / "model.onnx", shape=("batch", 3))
    assert sorted(settle(live, clock)) == ["config", "taken"]
    served = load_config(live.live / "double" / "config.pbtxt")
    assert list(served.input[0].dims) == [3] and policy(live, "double") == [2]


def test_a_config_refused_alone_is_judged_again_when_its_version_arrives(live, clock):
    wider(live)
    assert settle(live, clock) == ["config_refused"]
    assert live.sync() == []
    tiny_onnx(live.source / "double" / "2" / "model.onnx", shape=("batch", 3))
    assert sorted(settle(live, clock)) == ["config", "taken"]
    assert policy(live, "double") == [2] and live.status()["double"]["refused"] == []


@pytest.mark.parametrize("place", UNSAFE_ENTRIES.values(), ids=UNSAFE_ENTRIES.keys())
def test_a_version_holding_a_link_or_a_fifo_is_refused_and_the_live_copy_untouched(
    live, clock, place
):
    folder = write_echo_version(live.source / "echo" / "2", scale=3.0)
    place(folder)
    before = sorted(str(p.relative_to(live.live)) for p in live.live.rglob("*"))
    assert settle(live, clock) == ["refused"]
    reason = live.status()["echo"]["refused"][0]["reason"]
    assert "refused, a " in reason and "only folders and regular files" in reason
    assert sorted(str(p.relative_to(live.live)) for p in live.live.rglob("*")) == before
    assert list(live.staging.iterdir()) == []


def test_a_new_model_folder_holding_a_link_is_refused_whole(live, clock):
    model = live.source / "echo2"
    shutil.copytree(live.source / "echo", model)
    (model / "1" / "secrets").symlink_to("/etc")
    events = live.sync()
    clock.now += QUIET + 0.1
    events += live.sync()
    assert [e.kind for e in events] == ["model_refused"]
    assert "1/secrets: refused, a symbolic link" in events[0].reason
    assert not (live.live / "echo2").exists()
