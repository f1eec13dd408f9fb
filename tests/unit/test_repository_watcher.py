"""kyc_tools.operator.watcher: Triton's answers read, events counted, status served and printed."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

from kyc_testing import write_echo_version
from kyc_tools.cli import main
from kyc_tools.operator.drain import sessions_by_version
from kyc_tools.operator.live import Event, LiveRepository
from kyc_tools.operator.watcher import RepositoryWatcher, format_status, index_states, read_status

EXPOSITION = """# TYPE kyc_liveness_sessions_live gauge
kyc_liveness_sessions_live{model="liveness_sequence",version="1"} 2
kyc_liveness_sessions_live{model="liveness_sequence",version="2"} 1
kyc_liveness_sessions_live{model="liveness_sequence",version="2"} 3
nv_inference_request_success{model="face_embedding",version="1"} 10
nv_inference_pending_request_count{model="liveness_sequence",version="1"} 1
"""


def test_open_sessions_and_queued_requests_are_summed_per_model_version():
    assert sessions_by_version(EXPOSITION) == {("liveness_sequence", 1): 3.0,
                                               ("liveness_sequence", 2): 4.0}


def test_index_states_keep_versioned_entries_only():
    index = [{"name": "echo", "version": "1", "state": "READY", "reason": ""},
             {"name": "echo", "version": "2", "state": "UNAVAILABLE", "reason": "boom"},
             {"name": "new_model"}]
    assert index_states(index) == {("echo", 1): ("READY", ""), ("echo", 2): ("UNAVAILABLE",
                                                                              "boom")}


def watcher_over(tiny_repository: Path, tmp_path: Path, index) -> RepositoryWatcher:
    live = LiveRepository(tiny_repository, tmp_path / "live" / "models",
                          tmp_path / "live" / "staging", quiet_s=0.0)
    live.sync()
    return RepositoryWatcher(live, index=index, metrics_url=None, poll_s=0.0)


def test_a_refusal_is_counted_served_on_the_status_port_and_printed(
    tiny_repository, tmp_path, capsys
):
    ready = [{"name": n, "version": "1", "state": "READY"} for n in ("double", "echo", "pipe")]
    watcher = watcher_over(tiny_repository, tmp_path, lambda: ready)
    (tiny_repository / "echo" / "2").mkdir()  # no model.py
    watcher.sync_once()  # seen
    events = watcher.sync_once()  # quiet (0 s): checked, refused
    assert [e.kind for e in events] == ["refused"]
    port = watcher.serve_status("127.0.0.1", 0)
    try:
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
        assert 'kyc_repository_refusals_total{model="echo",stage="check"} 1.0' in metrics
        assert 'kyc_repository_serving_version{model="echo"} 1.0' in metrics
        status = read_status(f"127.0.0.1:{port}")
        assert status["models"]["echo"]["serving"] == [1]
        assert main(["repo", "status", "--url", f"127.0.0.1:{port}"]) == 0
    finally:
        watcher.stop()
    printed = capsys.readouterr().out
    assert "echo: serving 1" in printed
    assert "REFUSED  echo version 2: refused by the check" in printed and "no model.py" in printed


def test_an_idle_connection_to_the_status_port_holds_no_one_else(tiny_repository, tmp_path):
    import socket

    watcher = watcher_over(tiny_repository, tmp_path, lambda: [])
    port = watcher.serve_status("127.0.0.1", 0)
    try:
        with socket.create_connection(("127.0.0.1", port)):  # connected, sends nothing
            started = time.monotonic()
            body = urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=3).read()
            assert b"models" in body and time.monotonic() - started < 3
    finally:
        watcher.stop()


def test_a_taken_version_that_loads_is_counted_once(tiny_repository, tmp_path):
    states = [{"name": "echo", "version": "1", "state": "READY"}]
    watcher = watcher_over(tiny_repository, tmp_path, lambda: states)
    write_echo_version(tiny_repository / "echo" / "2")
    watcher.sync_once()
    assert [e.kind for e in watcher.sync_once()] == ["taken"]
    states.append({"name": "echo", "version": "2", "state": "READY"})
    assert [e.kind for e in watcher.sync_once()] == ["loaded"]
    assert watcher.sync_once() == []
    loaded = watcher.metrics.loaded.labels("echo")._value.get()
    assert loaded == 1.0


def test_kyc_repo_status_says_when_no_server_answers(capsys):
    assert main(["repo", "status", "--url", "127.0.0.1:9"]) == 1
    assert "no kyc serve status at 127.0.0.1:9" in capsys.readouterr().err


def test_format_status_lists_waiting_and_pinned_versions():
    event = Event("refused", "echo", 3, "repo/echo/3/model.py: missing", at=0.0)
    text = format_status({"source": "/r", "quiet_s": 2.0, "events": [],
                          "models": {"echo": {"serving": [1, 2], "pinned": [1], "loading": [],
                                              "waiting": {"4": "being copied"},
                                              "refused": [{"text": str(event)}]}}})
    assert "echo: serving 1, 2 (kept for open sessions: 1)" in text
    assert "waiting  4: being copied" in text
    assert "REFUSED  echo version 3" in text


def test_the_watchers_own_reads_do_not_wake_it(tiny_repository, tmp_path):
    """inotify reports opens and reads too: woken by its own reads of the configs, the
    watcher once looked without pause and kept a core busy."""
    watcher = watcher_over(tiny_repository, tmp_path, lambda: [])
    passes = []
    sync_once = watcher.sync_once
    watcher.sync_once = lambda: passes.append(1) or sync_once()
    watcher.start()
    try:
        time.sleep(2.0)
    finally:
        watcher.stop()
    assert len(passes) <= 2.0 / watcher.interval_s + 2, len(passes)
