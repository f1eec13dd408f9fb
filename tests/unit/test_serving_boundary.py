"""The serving package (backends/kyc) imports nothing of the tooling, read from its source.

What the Triton models run is ``kyc``; the ``kyc`` command, the bench, evaluation,
repository tools and the capture page are ``kyc_tools`` (tools/), the client SDK is
``kyc_client`` (client/, of which the server reads only the verdict's format), and model
export is ``kyc_export`` (export/). Checked statically here, every import in every
module, lazy ones included; test_pipeline.py checks what a stub loads at run time.
"""

from __future__ import annotations

import ast
import subprocess
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
# Of the client's distribution, the verdict's format alone: the server signs by it.
CLIENT_CONTRACT = ROOT / "client" / "kyc_client" / "verdict.py"
CLIENT_CONTRACT_MODULE = "kyc_client.verdict"


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
                     and top != "kyc" and top not in THIRD_PARTY
                     and name != CLIENT_CONTRACT_MODULE)
        if bad:
            found[str(path.relative_to(ROOT))] = bad
    return found


def test_the_serving_package_imports_no_tooling_and_no_client_libraries():
    assert outside_imports() == {}


def test_the_client_contract_the_server_imports_needs_no_client_library():
    """kyc_client.verdict loads neither the gRPC client nor anything of kyc_client but
    itself (kyc_client's __init__ imports its modules only when asked)."""
    assert {name.split(".")[0] for name in imported_modules(CLIENT_CONTRACT)} <= {
        *sys.stdlib_module_names, "cryptography", "__future__"}
    code = ("import sys, kyc_client.verdict; "
            "print(sorted(m for m in sys.modules if m.startswith(('kyc_client', 'tritonclient', "
            "'grpc', 'numpy'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=60)
    assert done.stdout.strip() == "['kyc_client', 'kyc_client.verdict']", done.stdout


def test_the_check_sees_a_lazy_tooling_import_inside_a_function(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from kyc_tools.repo.config import load_config\n")
    assert imported_modules(module) == {"kyc_tools.repo.config"}


def test_no_relative_import_reaches_out_of_the_serving_package():
    # relative imports are not resolved above: there are none to resolve
    for path in SERVING.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            assert not (isinstance(node, ast.ImportFrom) and node.level), path
