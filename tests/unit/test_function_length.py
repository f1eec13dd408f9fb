"""The package code (backends/, tools/, export/) has no function of 80 lines or more,
read from its source: a longer one is split into named helpers. A nested function is
part of the function that holds it (its lines count there, not apart)."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
PACKAGE_ROOTS = tuple(PROJECT_ROOT / name for name in ("backends", "tools", "export"))
MOST_LINES = 79  # of a function, its ``def`` line to its last line


def long_functions(roots: tuple[Path, ...] = PACKAGE_ROOTS,
                   most: int = MOST_LINES) -> dict[str, int]:
    """Every function (methods and nested functions included) over ``most`` lines: its
    lines, by ``<root>/<file>::<name>``. A nested function never has more lines than the
    one holding it, so the outermost is the one reported."""
    found = {}
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) \
                        and (lines := node.end_lineno - node.lineno + 1) > most:
                    found[f"{path.relative_to(root.parent)}::{node.name}"] = lines
    return found


def _function(name: str, lines: int) -> str:
    """A function of exactly ``lines`` lines."""
    body = "".join(f"    x{i} = {i}\n" for i in range(lines - 2))
    return f"def {name}():\n{body}    return 0\n"


def test_no_function_in_backends_tools_or_export_reaches_80_lines():
    assert long_functions() == {}


def test_each_package_root_holds_python_code_to_read():
    # a moved or renamed root would leave the scan above with nothing to hold
    assert all(any(root.rglob("*.py")) for root in PACKAGE_ROOTS)


def test_a_function_of_80_lines_is_caught_and_one_of_79_is_not(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "mod.py").write_text(_function("fits", 79) + "\n\n" + _function("too_long", 80))
    assert long_functions((package,)) == {"pkg/mod.py::too_long": 80}


def test_a_long_method_and_a_long_async_function_are_caught(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    method = textwrap.indent(_function("run", 85), "    ")
    (package / "step.py").write_text(
        f"class Step:\n{method}\n\nasync " + _function("serve", 81))
    assert long_functions((package,)) == {"pkg/step.py::run": 85, "pkg/step.py::serve": 81}


def test_nested_functions_count_toward_the_function_that_holds_them(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    inner = [textwrap.indent(_function(f"helper{k}", 30), "    ") for k in range(3)]
    (package / "app.py").write_text("def create_app():\n" + "".join(inner) + "    return 0\n")
    assert long_functions((package,)) == {"pkg/app.py::create_app": 92}
