"""lower_cpu_priority: every thread of the stub, and the threads it starts later."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from kyc.onnx_runtime.settings import OnnxModelSettings

CHILD = textwrap.dedent("""
    import os, threading
    from pathlib import Path
    from kyc.priority import lower_cpu_priority
    early = threading.Thread(target=threading.Event().wait, args=(5,), daemon=True)
    early.start()
    done = lower_cpu_priority(7)
    late = threading.Thread(target=threading.Event().wait, args=(5,), daemon=True)
    late.start()
    tids = sorted(int(p.name) for p in Path("/proc/self/task").iterdir())
    print(len(done), *(os.getpriority(os.PRIO_PROCESS, t) for t in tids))
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux thread niceness")
def test_every_thread_and_every_later_thread_gets_the_niceness():
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                         check=True).stdout.split()
    threads_set, priorities = int(out[0]), [int(v) for v in out[1:]]
    assert threads_set >= 2  # the main thread and the early one
    assert len(priorities) >= 3 and set(priorities) == {7}


def test_cpu_nice_is_read_from_the_config_and_bounded(tmp_path):
    config = {"name": "m", "max_batch_size": 0, "input": [], "output": [],
              "parameters": {"cpu_nice": {"string_value": "10"}}}
    assert OnnxModelSettings.from_config(config, tmp_path, "1").cpu_nice == 10
    config["parameters"]["cpu_nice"]["string_value"] = "25"
    with pytest.raises(ValueError, match="0-19"):
        OnnxModelSettings.from_config(config, tmp_path, "1")
