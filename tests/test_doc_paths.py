"""What README.md and docs/*.md say of the repository holds: every repository path they name exists, and the
behaviour docs/architecture.md states of constructing `Memory` is the code's."""

import importlib
import os
import re
from pathlib import Path

from storage.files.workspace import GITIGNORES, LAYOUT
from storage.memory import Memory

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# A repository path: one of the repository's top folders, then a file or folder name (a page's own `../` allowed).
# The workspace's folders (daily/, digest/, session/, metadata/, resource/) are the memory's layout, not the
# repository's; a path inside a longer one (`~/.local/state/dreamflow/logs`) or with a placeholder (`<id>`, `*`)
# is not taken.
TOP = ("storage", "engine", "flows", "tasks", "deployments", "dreamflow", "tests", "benchmarks", "docs", ".ci")
PATH = re.compile(r"(?<![\w./~-])(?:\.\./)?((?:" + "|".join(re.escape(t) for t in TOP) + r")/[\w./-]*\w)(?![\w<*{-])")


def named_paths(text: str) -> set[str]:
    return {m.group(1) for m in PATH.finditer(text)}


def exists(path: str) -> bool:
    """A file or folder of the repository, or `module/path.Name`: a name its module defines."""
    if (ROOT / path).exists():
        return True
    module, _, name = path.rpartition(".")
    return (ROOT / f"{module}.py").is_file() and hasattr(importlib.import_module(module.replace("/", ".")), name)


def test_every_repository_path_the_pages_name_exists():
    missing = [(page.relative_to(ROOT).as_posix(), path) for page in PAGES
               for path in sorted(named_paths(page.read_text())) if not exists(path)]
    assert missing == []
    assert exists("storage/files/locks.FileLock") and not exists("storage/files/locks.NoSuchLock")


def test_the_scan_sees_paths_and_leaves_workspace_and_home_paths_alone():
    text = ("`dreamflow/hooks/capture.py`, [benchmarks](../benchmarks/README.md#locomo-data), storage/x.py. "
            "`daily/2024-05-08/kyoto.md`, `~/.local/state/dreamflow/logs/`, `session/dialog/<id>.jsonl`, "
            "`~/src/web-app/.dreamflow/`, `docs/*.md`, `tests/`")
    assert named_paths(text) == {"dreamflow/hooks/capture.py", "benchmarks/README.md", "storage/x.py"}
    assert "dreamflow/hooks/capture.py" not in named_paths((ROOT / "docs" / "architecture.md").read_text())


def tree(root: Path) -> dict[str, int]:
    """Every path under `root` with its modification time (ns)."""
    return {p.relative_to(root).as_posix(): p.lstat().st_mtime_ns for p in root.rglob("*")}


def test_constructing_memory_makes_only_a_missing_layout_and_leaves_a_workspace_as_it_is(tmp_path):
    """docs/architecture.md: constructing `Memory` opens no index and reads no file; it makes the layout's folders
    and `.gitignore` files when they are missing, and changes nothing in an existing workspace."""
    root = tmp_path / "ws"
    Memory(root)
    made = {path for path in tree(root) if not path.startswith("metadata/journal/writer-")}  # this process's
    expected = {f"{'/'.join(Path(sub).parts[:i])}" for sub in LAYOUT for i in range(1, len(Path(sub).parts) + 1)}
    expected |= {f"{folder}/.gitignore" for folder in GITIGNORES} | {"metadata/journal"}
    assert made == expected and not (root / "metadata" / "index.duckdb").exists()

    Memory(root).write("notes/a.md", content="alpha")
    before = tree(root)
    os.utime(root / "notes" / "a.md", ns=(1, 1))  # a time construction would change if it touched the file
    before["notes/a.md"] = 1
    Memory(root)
    assert tree(root) == before


def test_the_walk_is_one_existing_file_per_step_and_at_most_twelve():
    """docs/architecture.md's walk of one memory, from the hook to a search hit: one file per step, each a file
    of the repository, none twice, at most 12 steps."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    walk = text.split("## The walk of one memory", 1)[1].split("\n## ", 1)[0]
    steps = re.findall(r"(?m)^\d+\. `([^`]+)`", walk)
    assert 0 < len(steps) <= 12 and len(steps) == len(re.findall(r"(?m)^\d+\. ", walk))
    assert len(set(steps)) == len(steps) and all((ROOT / step).is_file() for step in steps)
    assert steps[0].startswith("dreamflow/hooks/") and steps[-1].startswith("storage/search/")
