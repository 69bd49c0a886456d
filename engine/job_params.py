"""A job's parameters as its flow declares them: names, annotations and defaults, read with `ast` from the flow's
source file (flows/<module>.py), so the CLI options and MCP job tools show the flow's own defaults without
importing prefect or the flow. The flow function's signature is the only place a job's defaults are written.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

FLOWS = Path(__file__).resolve().parent.parent / "flows"
REQUIRED = object()  # the default of a parameter without one


@dataclass(frozen=True)
class JobParam:
    name: str
    annotation: str  # as written, e.g. "int" or "str | None"
    default: Any  # REQUIRED when the parameter has none


@cache
def job_params(module: str, function: str) -> dict[str, JobParam]:
    """The parameters of `function` in flows/<module>.py, in order (defaults must be literals)."""
    tree = ast.parse((FLOWS / f"{module}.py").read_text(encoding="utf-8"))
    found = next((node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == function), None)
    if found is None:
        raise LookupError(f"flows/{module}.py defines no function {function}")
    args = found.args
    positional = args.posonlyargs + args.args
    defaults = [REQUIRED] * (len(positional) - len(args.defaults)) + [ast.literal_eval(d) for d in args.defaults]
    keyword = [REQUIRED if d is None else ast.literal_eval(d) for d in args.kw_defaults]
    return {arg.arg: JobParam(arg.arg, ast.unparse(arg.annotation) if arg.annotation else "", default)
            for arg, default in zip(positional + args.kwonlyargs, defaults + keyword)}


def job_defaults(module: str, function: str) -> dict[str, Any]:
    """`{name: default}` of the parameters of `function` in flows/<module>.py that have one."""
    return {name: p.default for name, p in job_params(module, function).items() if p.default is not REQUIRED}
