"""The tests are held to the code's own standard, read from their source: shared helpers
live in helper modules of tests/ (kyc_testing.py and its siblings), never in a test
module that another one imports, and no test function is longer than a screen."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
SCREEN = 60  # lines of a test function, its ``def`` line to its last line


def _trees(root: Path, pattern: str) -> list[tuple[Path, ast.Module]]:
    return [(path, ast.parse(path.read_text(encoding="utf-8")))
            for path in sorted(root.rglob(pattern))]


def _is_test_module(name: str) -> bool:
    return name.split(".")[0].startswith("test_")


def imports_of_test_modules(root: Path = TESTS) -> dict[str, list[str]]:
    """Each test module's imports of a test module, at any depth (functions included)."""
    found = {}
    for path, tree in _trees(root, "test_*.py"):
        names = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names += [alias.name for alias in node.names if _is_test_module(alias.name)]
            elif isinstance(node, ast.ImportFrom):
                if node.module and _is_test_module(node.module):
                    names.append(node.module)
                elif not node.module:  # from . import test_x
                    names += [alias.name for alias in node.names if _is_test_module(alias.name)]
        if names:
            found[str(path.relative_to(root))] = sorted(names)
    return found


def long_test_functions(root: Path = TESTS, limit: int = SCREEN) -> dict[str, int]:
    """Every test function (methods included) over ``limit`` lines: its lines, by
    ``<file>::<name>``."""
    found = {}
    for path, tree in _trees(root, "*.py"):
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) \
                    and node.name.startswith("test_") \
                    and (lines := node.end_lineno - node.lineno + 1) > limit:
                found[f"{path.relative_to(root)}::{node.name}"] = lines
    return found


def test_no_test_module_imports_another_test_module():
    assert imports_of_test_modules() == {}


def test_no_test_function_is_longer_than_a_screen():
    assert long_test_functions() == {}


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def test_the_checks_catch_a_test_module_import_at_any_depth_and_allow_helper_modules(tmp_path):
    _write(tmp_path / "helpers.py", "def shared():\n    return 1\n")
    _write(tmp_path / "unit" / "test_a.py", "from helpers import shared\nimport kyc_testing\n")
    _write(tmp_path / "unit" / "test_b.py",
           "from test_a import shared\n\n\ndef test_b():\n    import test_c.sub\n")
    _write(tmp_path / "integration" / "test_c.py", "from . import test_b, helpers\n")
    assert imports_of_test_modules(tmp_path) == {"integration/test_c.py": ["test_b"],
                                             "unit/test_b.py": ["test_a", "test_c.sub"]}


def test_the_checks_catch_a_test_function_one_line_over_a_screen_and_spare_helpers(tmp_path):
    def body(indent: int) -> str:
        return "".join(f"{' ' * indent}x{k} = {k}\n" for k in range(SCREEN - 1))

    _write(tmp_path / "unit" / "test_long.py",
           f"def test_fits():\n{body(4)}\n\n"
           f"class TestGroup:\n    async def test_over(self):\n        pass\n{body(8)}\n\n"
           f"def helper_may_be_long():\n{body(4)}{body(4)}")
    assert long_test_functions(tmp_path) == {"unit/test_long.py::test_over": SCREEN + 1}
