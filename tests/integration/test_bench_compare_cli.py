"""`kyc bench --compare` as a user runs it, on a real server: the liveness workload in
turns, metered per frame (the server compared with itself: the figures' shape, not a
speed, is what is checked)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kyc_testing import PROJECT_ROOT

pytestmark = pytest.mark.integration


def test_compare_plays_liveness_sessions_on_each_server_and_meters_cpu_per_frame(server,
                                                                                 tmp_path):
    url = server.options.grpc_url
    out = tmp_path / "compare.json"
    result = subprocess.run(
        [sys.executable, "-m", "kyc_tools.cli", "bench", "--compare", url, "--compare", url,
         "--scenario", "liveness", "--levels", "2", "--rounds", "1", "--window-s", "3",
         "--json", str(out)],
        cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "liveness_sequence, concurrency 2" in result.stdout
    assert "CPU s/frame" in result.stdout
    (report,) = json.loads(out.read_text())["comparisons"]
    assert report["model"] == "liveness_sequence" and report["unit"] == "frame"
    for each in report["servers"]:
        assert each["errors"] == 0 and each["tallies"]["frames"] >= 10
        assert each["tallies"].get("sessions_live", 0) == each["tallies"].get("sessions", 0)
        assert each["cpu_s_per_frame"] > 0 and each["memory_mib"] > 100
    assert report["servers"][0]["cpu_ratio"] == 1.0
