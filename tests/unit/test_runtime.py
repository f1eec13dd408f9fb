"""The local runtime: backend directory from the wheel, server command line, cleanup."""

from __future__ import annotations

import os
import socket
import stat
import sys
from pathlib import Path

import pytest

from kyc_client.channel import CLIENT_KEY_ENV, client_key, default_client_key_file
from kyc_tools.operator.server import (
    InferenceLock,
    ServerError,
    ServerOptions,
    TritonServer,
    client_key_problems,
    default_admin_key_file,
    development_admin_key,
    development_client_key,
    free_ports,
    inference_lock,
    production_problems,
    remove_shm_regions,
    remove_stale_live_copies,
    remove_stale_shm_regions,
    start_until_ready,
)
from kyc_tools.operator.triton import STUB_NAME, assemble_backends, find_wheel_tree, system_install


@pytest.fixture
def assembled(tmp_path):
    return assemble_backends(tmp_path / "backends")


@pytest.fixture(autouse=True)
def config_home(tmp_path, monkeypatch):
    """Keys made by a server of these tests go to a folder of their own, and no client key
    comes from the environment."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv(CLIENT_KEY_ENV, raising=False)
    return tmp_path / "config"


def test_assembled_backends_hold_the_python_backend_with_the_stub_of_this_python(assembled):
    python_dir = assembled.backend_dir / "python"
    assert (python_dir / "libtriton_python.so").is_file()
    assert (python_dir / "triton_python_backend_utils.py").is_file()
    want = find_wheel_tree().stub(sys.version_info[:2])
    assert (python_dir / STUB_NAME).read_bytes() == want.read_bytes()


def test_assembled_backends_hold_a_python_based_onnxruntime_backend(assembled):
    glue = (assembled.backend_dir / "onnxruntime" / "model.py").read_text()
    assert 'TritonPythonModel = triton_model("kyc.onnx_runtime.backend:OnnxStep")' in glue


def test_server_environment_puts_this_interpreters_bin_first_on_path(assembled):
    env = assembled.environment({"PATH": "/usr/bin", "LD_LIBRARY_PATH": "/x"})
    assert env["PATH"].split(os.pathsep)[0] == str(Path(sys.executable).parent)
    libs = env["LD_LIBRARY_PATH"].split(os.pathsep)
    assert libs[0].endswith("nvidia_pytriton.libs")
    assert libs[-1] == "/x"


def test_stubs_write_no_bytecode_into_version_folders_which_would_reload_them(assembled):
    assert assembled.environment({})["PYTHONDONTWRITEBYTECODE"] == "1"


def test_the_server_returns_freed_memory_unless_the_caller_set_malloc_itself(assembled):
    env = assembled.environment({})
    assert env["MALLOC_ARENA_MAX"] == "2" and env["MALLOC_MMAP_THRESHOLD_"] == "4194304"
    assert env["MALLOC_TRIM_THRESHOLD_"] == "8388608" and env["OPENBLAS_NUM_THREADS"] == "1"
    assert assembled.environment({"MALLOC_ARENA_MAX": "8"})["MALLOC_ARENA_MAX"] == "8"


def test_command_line_runs_poll_mode_on_the_chosen_ports_with_a_locked_repository_api(
    assembled, tmp_path
):
    server = TritonServer(ServerOptions(tmp_path, http_port=1, grpc_port=2, metrics_port=3,
                                        admin_key="sekret"))
    server.install = assembled
    cmd = server.command()
    for arg in (
        "--model-control-mode=poll",
        "--http-port=1",
        "--grpc-port=2",
        "--metrics-port=3",
        f"--model-repository={tmp_path}",
        f"--backend-directory={assembled.backend_dir}",
        "--http-restricted-api=model-repository,shared-memory,trace,logging:admin-key=sekret",
        "--grpc-restricted-protocol=model-repository,shared-memory,trace,logging:"
        "admin-key=sekret",
        f"--backend-config=python,shm-region-prefix-name={server.shm_prefix}",
        f"--backend-config=python,shm-default-byte-size={64 * 2**20}",
        "--grpc-infer-allocation-pool-size=0",
        "--pinned-memory-pool-byte-size=0",
    ):
        assert arg in cmd


def test_without_an_admin_key_the_repository_api_is_locked_by_a_random_key(assembled, tmp_path):
    def key_of(cmd):
        (arg,) = [a for a in cmd if a.startswith("--http-restricted-api=model-repository")]
        return arg.rsplit("=", 1)[1]

    first, second = TritonServer(ServerOptions(tmp_path)), TritonServer(ServerOptions(tmp_path))
    assert first.admin_key != second.admin_key
    first.install = second.install = assembled
    assert len(key_of(first.command())) >= 24
    assert key_of(first.command()) != key_of(second.command())


def test_system_install_uses_the_installation_as_it_is(tmp_path):
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "tritonserver").write_bytes(b"")
    install = system_install(tmp_path)
    assert install.backend_dir == tmp_path / "backends"
    assert install.library_dirs == ()
    server = TritonServer(ServerOptions(tmp_path))
    server.install = install
    assert "--pinned-memory-pool-byte-size=0" not in server.command()


def test_shm_prefix_embeds_the_launcher_pid():
    assert TritonServer(ServerOptions(Path("."))).shm_prefix.startswith(f"kyc_{os.getpid()}_")


def test_remove_shm_regions_removes_only_the_given_prefix(tmp_path):
    for name in ("kyc_1_aaaaaa_x", "kyc_1_aaaaaa_y", "kyc_1_bbbbbb_x", "other"):
        (tmp_path / name).write_bytes(b"")
    assert sorted(remove_shm_regions("kyc_1_aaaaaa_", tmp_path)) == ["kyc_1_aaaaaa_x",
                                                                       "kyc_1_aaaaaa_y"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kyc_1_bbbbbb_x", "other"]


def test_stale_regions_of_dead_launchers_are_removed_and_live_ones_kept(tmp_path):
    dead = 2**22 + 12345  # above the default pid_max: no such process
    live = os.getpid()
    for name in (f"kyc_{dead}_abcdef_1", f"kyc_{live}_abcdef_1", "triton_python_backend_x"):
        (tmp_path / name).write_bytes(b"")
    assert remove_stale_shm_regions(tmp_path) == [f"kyc_{dead}_abcdef_1"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        f"kyc_{live}_abcdef_1",
        "triton_python_backend_x",
    ]


def test_the_token_ledger_folder_of_a_dead_server_is_removed_and_a_live_ones_kept(tmp_path):
    from kyc.decision.ledger import FolderLedger, shm_folder

    dead, live = 2**22 + 12346, os.getpid()
    for pid in (dead, live):
        FolderLedger(shm_folder(pid, tmp_path)).spend("t", 1e9, 2e9, "holder")
    assert remove_stale_shm_regions(tmp_path) == [f"kyc_{dead}_ledger"]
    assert [p.name for p in tmp_path.iterdir()] == [f"kyc_{live}_ledger"]


def test_client_urls_use_loopback_when_listening_on_all_addresses(tmp_path):
    options = ServerOptions(tmp_path, http_port=18000, grpc_port=18001, metrics_port=18002)
    assert options.http_url == "127.0.0.1:18000"
    assert options.grpc_url == "127.0.0.1:18001"
    assert options.metrics_url == "http://127.0.0.1:18002/metrics"


def test_python_models_are_precompiled_before_the_server_sees_them(tmp_path):
    # The stub writes __pycache__ on first load whatever PYTHONDONTWRITEBYTECODE says,
    # and poll mode reloads a model whose folder changed: the bytecode must be there first.
    from kyc_tools.operator.server import precompile_python_models

    version = tmp_path / "echo" / "1"
    version.mkdir(parents=True)
    (version / "model.py").write_text("X = 1\n")
    precompile_python_models(tmp_path)
    assert list((version / "__pycache__").glob("model.*.pyc"))
    precompile_python_models(tmp_path / "missing")  # nothing there: no error


@pytest.mark.parametrize("production", [False, True])
def test_shared_memory_trace_and_logging_apis_need_the_admin_key_in_every_mode(
    assembled, tmp_path, production
):
    server = TritonServer(ServerOptions(tmp_path, admin_key="k" * 20, client_key="c" * 20,
                                        production=production))
    server.install = assembled
    apis = "model-repository,shared-memory,trace,logging"
    cmd = server.command()
    assert f"--http-restricted-api={apis}:admin-key={'k' * 20}" in cmd
    assert f"--grpc-restricted-protocol={apis}:admin-key={'k' * 20}" in cmd
    assert "inference" not in apis and "health" not in apis


def _inference_args(server: TritonServer, assembled) -> list[str]:
    server.install = assembled
    return [arg for arg in server.command() if "kyc-client-key" in arg]


def test_a_client_key_locks_inference_under_its_own_key_and_is_checked_before_use(
    assembled, tmp_path
):
    server = TritonServer(ServerOptions(tmp_path, admin_key="k" * 20, client_key="c" * 20))
    assert _inference_args(server, assembled) == [
        f"--http-restricted-api=inference:kyc-client-key={'c' * 20}",
        f"--grpc-restricted-protocol=inference:kyc-client-key={'c' * 20}"]
    assert client_key_problems(None) == client_key_problems("Ab0._~+/-" * 2) == []
    assert len(client_key_problems("short=")) == 2
    with pytest.raises(ServerError, match=CLIENT_KEY_ENV):
        inference_lock(ServerOptions(tmp_path, client_key="short="))


def test_without_a_key_inference_is_locked_by_the_key_file_this_machines_clients_read(
    assembled, tmp_path, config_home, monkeypatch
):
    server = TritonServer(ServerOptions(tmp_path, admin_key="k" * 20))
    key_file = config_home / "kyc" / "client.key"
    assert server.inference_lock.origin == str(key_file) == str(default_client_key_file())
    key = key_file.read_text().strip()
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert len(key) >= 32 and client_key_problems(key) == [] and client_key() == key
    assert f"--grpc-restricted-protocol=inference:kyc-client-key={key}" in _inference_args(
        server, assembled)
    assert development_client_key() == key  # made once, then read
    monkeypatch.setenv(CLIENT_KEY_ENV, " " + "e" * 20)  # the variable first, on both sides
    assert inference_lock(ServerOptions(tmp_path)) == InferenceLock("e" * 20, "$KYC_CLIENT_KEY")
    assert client_key() == "e" * 20


def test_inference_is_open_only_when_the_caller_says_so_by_name(assembled, tmp_path,
                                                                 config_home):
    opened = TritonServer(ServerOptions(tmp_path, open_inference=True, client_key="c" * 20))
    assert _inference_args(opened, assembled) == []
    assert "--open-inference" in opened.inference_lock.origin
    assert not (config_home / "kyc" / "client.key").exists()  # nothing made for it


def test_production_never_falls_back_to_a_key_file(tmp_path, config_home):
    with pytest.raises(ServerError, match="no client key: set KYC_CLIENT_KEY"):
        inference_lock(ServerOptions(tmp_path, production=True))
    assert not (config_home / "kyc" / "client.key").exists()
    assert inference_lock(ServerOptions(tmp_path, production=True, open_inference=True)).key \
        is None


def test_the_development_admin_key_is_made_once_in_a_file_only_its_owner_reads(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert default_admin_key_file() == tmp_path / "kyc" / "admin.key"
    key = development_admin_key()
    assert len(key) >= 32 and development_admin_key() == key
    assert stat.S_IMODE(default_admin_key_file().stat().st_mode) == 0o600


def test_every_port_listens_on_loopback_unless_another_address_is_given(assembled, tmp_path):
    from kyc_tools.cli import build_parser

    server = TritonServer(ServerOptions(tmp_path))
    server.install = assembled
    cmd = server.command()
    for flag in ("--http-address", "--grpc-address", "--metrics-address"):
        assert f"{flag}=127.0.0.1" in cmd
    assert build_parser().parse_args(["serve"]).address == "127.0.0.1"
    assert build_parser().parse_args(["serve", "--host", "0.0.0.0"]).address == "0.0.0.0"


CLIENT = {CLIENT_KEY_ENV: "c" * 16}


@pytest.mark.parametrize(("admin_key", "env", "problems"), [
    ("k" * 16, {"KYC_TOKEN_KEY": "x", **CLIENT}, []),
    ("k" * 16, {"KYC_TOKEN_KEY_FILE": "/run/secrets/token", **CLIENT}, []),
    (None, {"KYC_TOKEN_KEY": "x", **CLIENT}, ["no model-repository API key"]),
    ("short", {"KYC_TOKEN_KEY": "x", **CLIENT}, ["shorter than 16"]),
    ("k" * 16, CLIENT, ["no liveness token key"]),
    ("k" * 16, {"KYC_TOKEN_KEY": "x"}, ["no client key: set KYC_CLIENT_KEY"]),
    (None, {}, ["no model-repository API key", "no liveness token key", "no client key"]),
])
def test_production_refuses_a_missing_or_short_admin_key_a_missing_token_key_or_client_key(
    admin_key, env, problems
):
    found = production_problems(admin_key, env)
    assert production_problems("k" * 16, {"KYC_TOKEN_KEY": "x"}, open_inference=True) == []
    assert len(found) == len(problems)
    for line, expected in zip(found, problems, strict=True):
        assert expected in line


def test_live_copies_of_dead_launchers_are_removed_and_others_kept(tmp_path):
    dead = 2**22 + 12345  # above the default pid_max: no such process
    live = os.getpid()
    for name in (f"kyc-live-{dead}-abc", f"kyc-live-{live}-abc", "kyc-live-abc", "other"):
        (tmp_path / name / "models").mkdir(parents=True)
    assert remove_stale_live_copies(tmp_path) == [f"kyc-live-{dead}-abc"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["kyc-live-abc", f"kyc-live-{live}-abc", "other"])


def test_free_ports_are_distinct_and_bindable():
    ports = free_ports(16)
    assert len(set(ports)) == 16  # one at a time, the kernel may repeat one
    for port in ports:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_options_on_free_ports_listen_on_loopback_only(tmp_path):
    options = ServerOptions.on_free_ports(tmp_path, model_control="explicit")
    assert options.address == "127.0.0.1" and options.model_control == "explicit"
    assert len({options.http_port, options.grpc_port, options.metrics_port}) == 3


class _Launched:
    """A server as start_until_ready drives it, failing where it is told to."""

    def __init__(self, log_file: Path, fails_in: str = "") -> None:
        self.log_file, self.fails_in, self.calls = log_file, fails_in, []

    def start(self) -> None:
        self.calls.append("start")
        self.log_file.write_text("x" * 50 + "model loaded\n")
        if self.fails_in == "start":
            raise ServerError("no liveness token key")

    def wait_ready(self, timeout: float) -> None:
        self.calls.append(f"wait_ready {timeout:.0f}")
        if self.fails_in == "wait_ready":
            raise ServerError(f"tritonserver not ready after {timeout:.0f} s")

    def stop(self, grace: float) -> None:
        self.calls.append(f"stop {grace:.0f}")
        self.log_file.write_text("stopped\n")


def test_start_until_ready_starts_waits_and_leaves_a_ready_server_running(tmp_path):
    server = _Launched(tmp_path / "server.log")
    assert start_until_ready(server, timeout_s=180, stop_grace_s=5) is server
    assert server.calls == ["start", "wait_ready 180"]


@pytest.mark.parametrize("fails_in", ["start", "wait_ready"])
def test_a_server_that_does_not_get_ready_is_stopped_and_the_error_ends_with_its_log(
        tmp_path, fails_in):
    server = _Launched(tmp_path / "server.log", fails_in)
    with pytest.raises(ServerError) as raised:
        start_until_ready(server, timeout_s=30, stop_grace_s=7, tail_chars=20)
    cause = "no liveness token key" if fails_in == "start" else "not ready after 30 s"
    assert cause in str(raised.value)
    assert str(raised.value).endswith("\n--- server log tail ---\n" + "x" * 7 + "model loaded\n")
    assert server.calls[-1] == "stop 7"
