"""docs/cli.md, docs/http.md, docs/mcp-tools.md and docs/jobs-reference.md are generated from the code (dreamflow/docs_gen.py) and must
match it, the way sqlite-utils keeps its CLI docs true with cog."""

import os
import subprocess
import sys

import pytest

from dreamflow import docs_gen
from dreamflow.mcp.server import tools
from engine.ops import OPS


def test_the_checked_in_references_match_the_code():
    stale = docs_gen.stale()
    assert not stale, (f"{', '.join(stale)} out of date with the code: run `{docs_gen.COMMAND}` and commit "
                       "the result")


def test_the_references_cover_every_operation_command_and_tool():
    docs = docs_gen.render_all()
    for op in OPS:
        assert f"## `dreamflow {op.cli_name}`" in docs["docs/cli.md"], op.name
        assert f"## `POST /ops/{op.name}`" in docs["docs/http.md"], op.name
    for name in tools("all"):
        assert f"## `{name}`" in docs["docs/mcp-tools.md"], name
    from engine.jobs import JOBS, TURN

    for job in (*JOBS.values(), TURN):
        assert f"## `{job.name}`" in docs["docs/jobs-reference.md"] and f"## `dreamflow {job.command}`" in \
            docs["docs/cli.md"], job.name
        for p in job.parameters():  # every parameter with its default and help, from the one declaration
            assert f"| `{p.name}` |" in docs["docs/jobs-reference.md"] and p.help, (job.name, p.name)
    assert "## `dreamflow start`" in docs["docs/cli.md"] and "### `dreamflow hook claude-code`" in docs["docs/cli.md"]


@pytest.mark.e2e
def test_check_names_stale_files_and_output_does_not_depend_on_the_environment(tmp_path, monkeypatch):
    env = {**os.environ, "COLUMNS": "40", "DREAMFLOW_WORKSPACE": str(tmp_path), "DREAMFLOW_MCP_TOOLS": "all",
           "DREAMFLOW_TURNS_PER_SUMMARY": "3", "TZ": "Asia/Tokyo"}
    check = subprocess.run([sys.executable, "-m", "dreamflow.docs_gen", "--check"], env=env, capture_output=True,
                           text=True, timeout=120)
    assert check.returncode == 0, check.stderr
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs/cli.md").write_text("old\n")
    monkeypatch.setattr(docs_gen, "ROOT", tmp_path)
    assert docs_gen.main(["--check"]) == 1
    assert docs_gen.main([]) == 0 and docs_gen.stale() == []
