"""Where the Triton server comes from, and the backend directory it runs with.

Two installations are supported with one code path:

* the PyPI wheel ``nvidia-pytriton`` (local CPU runtime, CI, developers): it
  ships a real ``tritonserver`` (2.51.0) with the Python backend and one stub
  per Python version, but no onnxruntime backend. :func:`assemble_backends`
  builds a backend directory from it: the Python backend with the stub of the
  running Python, plus a *Python-based* backend named ``onnxruntime`` that
  serves ``model.onnx`` with onnxruntime on the CPU, so that configs with
  ``platform: "onnxruntime_onnx"`` load unchanged;
* a full Triton installation such as ``/opt/tritonserver`` in the NGC image
  (production, GPU): used as it is.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import kyc

WHEEL_DISTRIBUTION = "nvidia-pytriton"
# the serving package's own backends (kyc/onnx_runtime/local_backends), found through its import
LOCAL_BACKENDS = Path(kyc.__file__).resolve().parent / "onnx_runtime" / "local_backends"
STUB_NAME = "triton_python_backend_stub"


class TritonNotFoundError(RuntimeError):
    """No usable tritonserver installation was found."""


@dataclass(frozen=True)
class TritonInstall:
    """A tritonserver binary with the directories it needs."""

    server: Path
    backend_dir: Path
    cache_dir: Path | None
    library_dirs: tuple[Path, ...] = field(default=())
    origin: str = "system"

    def environment(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """Environment for the server process.

        The Python stubs take their stdlib and site-packages from the first
        ``python3`` on PATH (PYTHONPATH and VIRTUAL_ENV are ignored), so the
        directory of the running interpreter (the venv's ``bin``) goes first.
        """
        env = dict(os.environ if base is None else base)
        bin_dir = str(Path(sys.executable).parent)
        env["PATH"] = os.pathsep.join([bin_dir, env.get("PATH", "")]).rstrip(os.pathsep)
        # No bytecode from other Python processes of the server. The stubs ignore it
        # (measured): TritonServer.start precompiles the Python models instead
        # (kyc_tools.repo.publish.precompile_python_models).
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        # glibc malloc: freed blocks of 4 MiB and more go back to the system, and
        # few per-thread arenas. Without this the onnxruntime arena shrinkage frees
        # into a heap that never shrinks (measured by kyc bench --quick: server
        # and stubs 2115 -> 1605 MiB resident; docs/performance.md). A fixed mmap
        # threshold also fixes the trim threshold at glibc's 128 KiB: every image
        # buffer freed at the top of the heap went back to the system and came back
        # page by page (1,570 page faults and 2 of the 4 ms of a 720x900 JPEG's
        # decode); up to 8 MiB free at the top is kept. A value set by the caller wins.
        for name, value in {**MALLOC_SETTINGS, **THREAD_SETTINGS}.items():
            env.setdefault(name, value)
        if self.library_dirs:
            libs = [str(d) for d in self.library_dirs]
            if env.get("LD_LIBRARY_PATH"):
                libs.append(env["LD_LIBRARY_PATH"])
            env["LD_LIBRARY_PATH"] = os.pathsep.join(libs)
        return env


MALLOC_SETTINGS = {"MALLOC_ARENA_MAX": "2", "MALLOC_MMAP_THRESHOLD_": str(4 * 1024 * 1024),
                   "MALLOC_TRIM_THRESHOLD_": str(8 * 1024 * 1024)}
# numpy's OpenBLAS in each stub: one thread. Its worker threads spin (sched_yield)
# for a while after every call, and the stubs call it on tiny matrices (alignment,
# head pose): in the liveness stub under 8 sessions, OpenBLAS's idle worker burnt 8.5
# s of CPU in 16 s, twice the stub's own Python work (gdb: blas_thread_server).
THREAD_SETTINGS = {"OPENBLAS_NUM_THREADS": "1"}


@dataclass(frozen=True)
class WheelTree:
    """The server tree inside the installed ``nvidia-pytriton`` wheel."""

    root: Path
    libs: Path

    @property
    def server(self) -> Path:
        return self.root / "bin" / "tritonserver"

    @property
    def python_backend(self) -> Path:
        return self.root / "backends" / "python"

    @property
    def caches(self) -> Path:
        return self.root / "caches"

    def stub(self, version: tuple[int, int]) -> Path:
        return self.root / "python_backend_stubs" / f"{version[0]}.{version[1]}" / STUB_NAME


def find_wheel_tree() -> WheelTree:
    """Locate the server tree of the installed wheel without importing pytriton.

    The wheel is installed with ``--no-deps``: importing ``pytriton`` would pull
    its own dependencies, so only the distribution's files are located.
    """
    try:
        dist = importlib.metadata.distribution(WHEEL_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError as exc:
        raise TritonNotFoundError(
            f"{WHEEL_DISTRIBUTION} is not installed in {sys.prefix}: run `make setup`"
        ) from exc
    tree = WheelTree(
        root=Path(str(dist.locate_file("pytriton/tritonserver"))),
        libs=Path(str(dist.locate_file("nvidia_pytriton.libs"))),
    )
    if not tree.server.is_file():
        raise TritonNotFoundError(f"no tritonserver binary at {tree.server}")
    return tree


def missing_libraries(binary: Path, env: dict[str, str] | None = None) -> list[str]:
    """Shared libraries ``binary`` needs that the dynamic loader cannot find."""
    ldd = shutil.which("ldd")
    if ldd is None:
        return []
    out = subprocess.run(
        [ldd, str(binary)], capture_output=True, text=True, env=env, check=False
    ).stdout
    return [line.split("=>")[0].strip() for line in out.splitlines() if "not found" in line]


def assemble_backends(
    dest: Path, tree: WheelTree | None = None, python: tuple[int, int] | None = None
) -> TritonInstall:
    """Build a backend directory at ``dest`` from the wheel and return the install.

    ``dest/python`` holds the Python backend and the stub for ``python`` (the
    running interpreter by default); ``dest/<name>/model.py`` holds each local
    Python-based backend (``onnxruntime``).
    """
    tree = tree or find_wheel_tree()
    python = python or (sys.version_info.major, sys.version_info.minor)
    stub = tree.stub(python)
    if not stub.is_file():
        raise TritonNotFoundError(
            f"the {WHEEL_DISTRIBUTION} wheel has no Python backend stub for Python "
            f"{python[0]}.{python[1]}"
        )
    python_dir = dest / "python"
    shutil.copytree(tree.python_backend, python_dir, dirs_exist_ok=True)
    shutil.copy2(stub, python_dir / STUB_NAME)
    for backend in sorted(p for p in LOCAL_BACKENDS.iterdir() if (p / "model.py").is_file()):
        target = dest / backend.name
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy2(backend / "model.py", target / "model.py")

    install = TritonInstall(
        server=tree.server,
        backend_dir=dest,
        cache_dir=tree.caches,
        library_dirs=(tree.libs,),
        origin=f"{WHEEL_DISTRIBUTION} wheel",
    )
    missing = missing_libraries(python_dir / STUB_NAME, install.environment())
    if missing:
        raise TritonNotFoundError(
            f"the Python backend stub cannot start, missing {', '.join(missing)}: install "
            f"the Debian/Ubuntu package libpython{python[0]}.{python[1]} (`make setup` does)"
        )
    return install


def system_install(home: Path) -> TritonInstall:
    """A complete Triton installation (``/opt/tritonserver`` in the NGC image)."""
    server = home / "bin" / "tritonserver"
    if not server.is_file():
        raise TritonNotFoundError(f"no tritonserver binary at {server}")
    caches = home / "caches"
    return TritonInstall(
        server=server,
        backend_dir=home / "backends",
        cache_dir=caches if caches.is_dir() else None,
        origin=str(home),
    )
