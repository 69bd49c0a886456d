"""The shape docs/architecture.md promises holds in the code: imports point one way down the layers, no modules
import each other in a circle, and storage/ stays plain Python. Imports inside functions count too."""

import ast
import json
import os
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ["dreamflow", "deployments", "flows", "tasks", "engine", "storage"]  # each imports only those below it
SAME_LAYER = {"deployments": "flows"}  # the deployments declare the flows they run: one layer in the docs' picture
HEAVY = ("prefect", "openai", "torch", "sentence_transformers")


@cache
def imports() -> dict[str, set[str]]:
    """{module: the modules and packages it imports, anywhere in its code}."""
    found = {}
    for package in LAYERS:
        for path in sorted((ROOT / package).rglob("*.py")):  # sub-packages too (dreamflow/web)
            parts = path.relative_to(ROOT).with_suffix("").parts
            module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            names = set()
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names |= {alias.name for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names.add(node.module)
                    if node.module.split(".")[0] in LAYERS:  # `from storage import index` imports storage.index
                        names |= {f"{node.module}.{alias.name}" for alias in node.names}
            found[module] = names
    return found


def rank(module: str) -> int:
    package = module.split(".")[0]
    return LAYERS.index(SAME_LAYER.get(package, package))


def test_imports_point_down_the_layers():
    upward = [(module, name) for module, names in imports().items() for name in names
              if name.split(".")[0] in LAYERS and rank(name) < rank(module)]
    assert upward == []


def test_storage_imports_no_prefect_llm_client_or_torch():
    heavy = [(module, name) for module, names in imports().items() if module.startswith("storage")
             for name in names if name.split(".")[0] in HEAVY]
    assert heavy == []


def test_no_modules_import_each_other_in_a_circle():
    found = imports()
    graph = {module: {name for name in names if name in found} for module, names in found.items()}
    circles, state = [], {}

    def visit(module: str, path: list[str]) -> None:  # depth first; a module met again on the path is a circle
        state[module] = "open"
        for name in sorted(graph[module]):
            if state.get(name) == "open":
                circles.append(path[path.index(name):] + [name])
            elif name not in state:
                visit(name, [*path, name])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert circles == []


def _is_task(decorator: ast.expr) -> bool:
    """`@task` or `@task(...)` (also spelled `prefect.task`)."""
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return (isinstance(target, ast.Name) and target.id == "task") or \
        (isinstance(target, ast.Attribute) and target.attr == "task")


SQL = re.compile(r"\b(SELECT|INSERT|UPDATE|DELETE|CREATE TABLE)\b.*\b(FROM|INTO|SET|WHERE)\b", re.S)


def test_tasks_holds_prefect_tasks_only_and_no_sql():
    """tasks/ is the Prefect layer: each module defines tasks; domain logic is in engine/, SQL in storage/."""
    without_tasks, sql = [], []
    for path in sorted((ROOT / "tasks").rglob("*.py")):
        name = str(path.relative_to(ROOT))
        tree = ast.parse(path.read_text(), name)
        functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        if path.name != "__init__.py" and not any(_is_task(d) for f in functions for d in f.decorator_list):
            without_tasks.append(name)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
                if any(n.split(".")[0] == "duckdb" for n in names):
                    sql.append((name, node.lineno, "imports duckdb"))
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    node.func.attr in ("execute", "executemany", "sql"):
                sql.append((name, node.lineno, ast.unparse(node.func)))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and SQL.search(node.value):
                sql.append((name, node.lineno, node.value[:40]))
    assert without_tasks == [] and sql == []


IMPORT_ONLY = """
import json, logging, os, sys
from engine import settings

read = []
real = settings.Settings.__init__
settings.Settings.__init__ = lambda self, *a, **k: (read.append(1), real(self, *a, **k))[-1]
before = dict(os.environ)
for name in sys.argv[1:]:
    __import__(name)
changed = sorted(k for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k))
filters = [type(f).__name__ for n in ("prefect.flow_runs", "prefect.task_runs") for f in logging.getLogger(n).filters]
print(json.dumps({"environment changed": changed, "settings read": len(read), "log filters": filters}))
"""


def test_importing_flows_and_tasks_configures_nothing(tmp_path):
    """No work at import: Prefect's environment is configured by what runs flows (engine.prefect_env), and
    Dreamflow's settings are read when a run starts, never when a flow or task module is imported."""
    modules = sorted(m for m in imports() if m.split(".")[0] in ("flows", "tasks"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_") and k != "DO_NOT_TRACK"}
    env.update(PREFECT_HOME=str(tmp_path / "prefect"), PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", IMPORT_ONLY, *modules], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {"environment changed": [], "settings read": 0,
                                                       "log filters": []}
    assert "flows.auto_dream" in modules and "tasks.dream" in modules
