"""The serving package (backends/kyc) imports nothing of the tooling, read from its source.

What the Triton models run is ``kyc``; the ``kyc`` command, the client SDK, the bench,
evaluation, repository tools and the capture page are ``kyc_tools`` (tools/), and
model export is ``kyc_export`` (export/). Checked statically here, every import in every
module, lazy ones included; test_pipeline.py checks what a stub loads at run time.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SERVING = ROOT / "backends" / "kyc"

# What the serving code may import besides the standard library and itself: the
# libraries of the steps and the Python backend's own module. Not the gRPC/HTTP
# clients, plotting, the watcher or the web stack.
THIRD_PARTY = frozenset({
    "PIL", "cryptography", "cv2", "google", "iso3166", "numpy", "onnx", "onnxruntime",
    "openvino", "pyclipper", "triton_python_backend_utils",
})


def imported_modules(path: Path) -> set[str]:
    """Absolute module names a file imports, at any depth (functions included)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def outside_imports() -> dict[str, list[str]]:
    """Each serving module's imports that are neither stdlib, kyc, nor allowed."""
    found = {}
    for path in sorted(SERVING.rglob("*.py")):
        bad = sorted(name for name in imported_modules(path)
                     if (top := name.split(".")[0]) not in sys.stdlib_module_names
                     and top != "kyc" and top not in THIRD_PARTY)
        if bad:
            found[str(path.relative_to(ROOT))] = bad
    return found


def test_the_serving_package_imports_no_tooling_and_no_client_libraries():
    assert outside_imports() == {}


def test_the_check_sees_a_lazy_tooling_import_inside_a_function(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from kyc_tools.repo.config import load_config\n")
    assert imported_modules(module) == {"kyc_tools.repo.config"}


def test_no_relative_import_reaches_out_of_the_serving_package():
    # relative imports are not resolved above: there are none to resolve
    for path in SERVING.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            assert not (isinstance(node, ast.ImportFrom) and node.level), path
