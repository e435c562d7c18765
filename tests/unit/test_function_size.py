# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Orchestrators as steps: no function of the collection's code runs over 40 lines (its body, docstring aside), so that
each reads on one screen; complexity is ruff's (C901, at most 12, ruff.toml) everywhere, and radon's (which also counts
boolean operators and comprehensions) at most 15 in the runners."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "plugins"
MAX_LINES = 40


def _body_lines(function) -> int:
    first = function.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and len(function.body) > 1:
        first = function.body[1]
    return function.end_lineno - first.lineno + 1


def test_no_function_is_longer_than_40_lines():
    long = []
    for path in sorted(ROOT.rglob("*.py")):
        if path.name.endswith("_pb2.py"):  # generated
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _body_lines(node) > MAX_LINES:
                long.append(f"{path.relative_to(ROOT.parent)}:{node.lineno} {node.name} ({_body_lines(node)} lines)")
    assert long == [], "split these into steps:\n" + "\n".join(long)


MAX_RUNNER_COMPLEXITY = 15


def test_no_orchestrator_is_over_complexity_15_counting_every_condition():
    """The runners (``*runner.py``: what a module calls) read as steps: radon's count, which adds each boolean
    operator and comprehension that ruff's McCabe count leaves out, at most 15 per function."""
    from radon.complexity import cc_visit

    heavy = [f"{path.relative_to(ROOT.parent)}:{block.lineno} {block.name} ({block.complexity})"
             for path in sorted(ROOT.rglob("*runner.py"))
             for block in _functions(cc_visit(path.read_text(encoding="utf-8")))
             if block.complexity > MAX_RUNNER_COMPLEXITY]
    assert heavy == [], "split these into steps:\n" + "\n".join(heavy)


def _functions(blocks):
    """Every function radon found, methods, nested functions and those of nested classes included (radon counts a
    closure apart from the function around it)."""
    for block in blocks:
        if hasattr(block, "methods"):  # a class: its methods and the classes inside it
            yield from _functions(list(block.methods) + list(getattr(block, "inner_classes", [])))
        else:
            yield block
            yield from _functions(getattr(block, "closures", []))
