"""The `dreamflow` CLI as users and agents call it, over a real workspace: most commands through click in this
process (`run`: the same command objects, arguments, output streams and exit codes, without a Python start and the
imports per call); real subprocesses where the process is the point (`run_process`: `python -m dreamflow`, piped
stdin, the imports a command pays, cli_probe)."""

import json
import os
import subprocess
import sys
import traceback
import typing
from pathlib import Path

import pytest
from cli_probe import ENTRY_PROBE, run_cli

from engine import ops
from storage.memory import Memory

HEAVY = ("prefect", "openai", "torch", "sentence_transformers", "transformers", "pydantic", "fastapi", "uvicorn")


def run_process(ws, *args, input="", env=None):
    """Run `python -m dreamflow --workspace WS ARGS...` and return the CompletedProcess."""
    full_env = {k: v for k, v in os.environ.items() if k != "DREAMFLOW_WORKSPACE"}
    full_env.update(env or {})
    cmd = [sys.executable, "-m", "dreamflow", *(["--workspace", str(ws)] if ws else []), *args]
    return subprocess.run(cmd, capture_output=True, text=True, input=input, env=full_env, timeout=120)


def run(ws, *args, input="", env=None):
    """`dreamflow --workspace WS ARGS...` run by click in this process (`invoke`), without DREAMFLOW_WORKSPACE."""
    argv = [*(["--workspace", str(ws)] if ws else []), *args]
    return invoke(argv, input=input, env={"DREAMFLOW_WORKSPACE": None, **(env or {})})


def invoke(argv, input: str | None = "", env: dict | None = None, cwd=None) -> subprocess.CompletedProcess:
    """`dreamflow ARGV...` run by click in this process, as a CompletedProcess: stdout, stderr (with the traceback
    an uncaught exception would print) and the exit code the `dreamflow` process would have. `env` changes the
    environment for the call (None: unset), `cwd` the working folder."""
    from click.testing import CliRunner

    from dreamflow.cli import cli
    from engine.access import client

    before, environ = os.getcwd(), dict(os.environ)
    try:
        if cwd is not None:
            os.chdir(cwd)
        result = CliRunner().invoke(cli, [str(a) for a in argv], input=input, env=env, prog_name="dreamflow")
    finally:
        os.chdir(before)
        os.environ.clear()  # as a process's would: what the command set (the hook's lock timeout) goes with it
        os.environ.update(environ)
        client._chosen.clear()  # and the memory it chose (engine/access/client.py: once per process)
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        stderr += "".join(traceback.format_exception(*result.exc_info))
    return subprocess.CompletedProcess(["dreamflow", *argv], result.exit_code, result.stdout, stderr)


def ok(ws, *args, via=None, **kw):
    proc = (via or run)(ws, *args, **kw)
    assert proc.returncode == 0, proc.stderr
    return proc


def as_json(ws, *args, **kw):
    return json.loads(ok(ws, *args, "--json", **kw).stdout)


@pytest.fixture
def ws(tmp_path):
    return tmp_path / "ws"


@pytest.mark.e2e
def test_write_search_read_round_trip(ws):
    """In real processes: `python -m dreamflow` as a user types it."""
    written = as_json(ws, "write", "digest/wiki/boats", "--name", "Boats", "--description", "Sailing notes",
                      "--content", "The catamaran has two hulls.\nLine two.\nLine three.\n", via=run_process)
    assert written["path"] == "digest/wiki/boats.md" and written["created"] is True

    hits = as_json(ws, "search", "catamaran", "--limit", "10", via=run_process)
    assert [h["path"] for h in hits] == ["digest/wiki/boats.md"]
    assert {"path", "start_line", "end_line", "score", "text"} <= set(hits[0])

    people = ok(ws, "search", "catamaran", via=run_process).stdout
    assert "digest/wiki/boats.md:" in people and "catamaran" in people

    part = ok(ws, "read", "digest/wiki/boats.md", "--start-line", "5", "--end-line", "6", via=run_process).stdout
    assert part == "     5\tThe catamaran has two hulls.\n     6\tLine two.\n"
    assert as_json(ws, "read", "digest/wiki/boats.md")["total_lines"] == 7


@pytest.mark.e2e
def test_content_from_file_and_stdin(ws, tmp_path):
    body = tmp_path / "body.md"
    body.write_text("from a file: [[digest/wiki/x.md]]\n")
    ok(ws, "write", "notes/f.md", "--file", str(body))
    ok(ws, "append", "notes/f.md", input="from stdin\n", via=run_process)
    ok(ws, "prepend", "notes/f.md", "--file", "-", input="at the top\n", via=run_process)
    text = (ws / "notes/f.md").read_text()
    assert text == "at the top\nfrom a file: [[digest/wiki/x.md]]\nfrom stdin\n"
    assert run_process(ws, "append", "notes/f.md").returncode == 2  # no content anywhere (an empty pipe): usage error
    assert run(ws, "write", "notes/g.md", "--content", "x", "--file", str(body)).returncode == 2


def test_workspace_from_environment(ws):
    ok(None, "write", "notes/env.md", "--content", "set through the environment",
       env={"DREAMFLOW_WORKSPACE": str(ws)})
    assert (ws / "notes/env.md").read_text() == "set through the environment\n"
    assert (ws / "digest/procedure").is_dir() and (ws / "session/dialog").is_dir()


@pytest.mark.parametrize("bad", ["../escape.md", "/etc/passwd", "notes/../../escape.md"])
def test_path_escapes_exit_2_with_a_clear_message(ws, bad):
    proc = run(ws, "write", bad, "--content", "x")
    assert proc.returncode == 2
    assert "workspace" in proc.stderr and "Traceback" not in proc.stderr
    err = json.loads(run(ws, "read", bad, "--json").stdout)["error"]
    assert err["type"] == "PathError" and err["exit_code"] == 2
    assert not (ws.parent / "escape.md").exists()


def test_symlink_escape_is_refused(ws, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "s.md").write_text("secret")
    Memory(ws)  # create the layout
    os.symlink(outside, ws / "digest" / "link")
    proc = run(ws, "read", "digest/link/s.md")
    assert proc.returncode == 2 and "symlink" in proc.stderr
    assert run(ws, "write", "digest/link/new.md", "--content", "x").returncode == 2
    assert sorted(p.name for p in outside.iterdir()) == ["s.md"]


def test_exit_codes(ws):
    ok(ws, "write", "notes/a.md", "--content", "pear pear")
    assert run(ws, "read", "notes/missing.md").returncode == 3                       # NotFound
    assert run(ws, "edit", "notes/a.md", "--old", "pear", "--new", "fig").returncode == 4  # Conflict
    assert run(ws, "create", "notes/a.md", "--content", "again").returncode == 4
    assert run(ws, "read", "notes/a.md", "--start-line", "x").returncode == 2          # click usage error
    assert run(ws, "no-such-command").returncode == 2
    assert run(ws, "daily-reindex", "yesterday").returncode == 2                      # InvalidInput
    under_a_file = run(ws, "write", "notes/a.md/inside.md", "--content", "x")        # OSError, no traceback
    assert under_a_file.returncode == 1 and "notes/a.md" in under_a_file.stderr
    assert "Traceback" not in under_a_file.stderr
    err = json.loads(run(ws, "edit", "notes/a.md", "--old", "kiwi", "--new", "fig", "--json").stdout)["error"]
    assert err == {"type": "Conflict", "message": err["message"], "exit_code": 4} and "not found" in err["message"]
    assert (ws / "notes/a.md").read_text() == "pear pear\n"


def test_move_and_delete_report_links(ws):
    ok(ws, "write", "digest/wiki/a.md", "--content", "A")
    ok(ws, "write", "notes/b.md", "--content", "see [[digest/wiki/a.md#L1|the A]]")
    moved = as_json(ws, "move", "digest/wiki/a.md", "digest/wiki/z.md")
    assert moved["rewritten"] == [{"path": "notes/b.md", "links": 1}]
    assert (ws / "notes/b.md").read_text() == "see [[digest/wiki/z.md#L1|the A]]\n"
    deleted = ok(ws, "delete", "digest/wiki/z.md")
    assert "notes/b.md:1" in deleted.stderr
    assert as_json(ws, "delete", "notes/b.md")["inbound"] == []


def test_frontmatter_tags_and_days(ws):
    ok(ws, "write", "daily/2024-05-08/a", "--name", "A", "--description", "Day card",
       "--metadata", "tags=[\"trip\"]", "--metadata", '{"mood": "good"}', "--content", "body")
    assert as_json(ws, "frontmatter-get", "daily/2024-05-08/a.md")["frontmatter"] == {
        "name": "A", "description": "Day card", "tags": ["trip"], "mood": "good"}
    ok(ws, "frontmatter-update", "daily/2024-05-08/a.md", "--metadata", "mood=great", "--metadata", "stars=5")
    fm = as_json(ws, "frontmatter-delete-keys", "daily/2024-05-08/a.md", "stars")["frontmatter"]
    assert fm == {"name": "A", "description": "Day card", "tags": ["trip"], "mood": "great"}
    assert as_json(ws, "tags")[0]["tag"] == "trip"
    page = as_json(ws, "daily-reindex", "2024-05-08")
    assert page["path"] == "daily/2024-05-08.md"
    assert "[[daily/2024-05-08/a.md|A]]: Day card" in (ws / "daily/2024-05-08.md").read_text()
    assert as_json(ws, "daily-list")["days"] == [{"date": "2024-05-08", "cards": 1, "index_page": True}]
    assert "2024-05-08" in ok(ws, "daily-list").stdout


def test_upload_download(ws, tmp_path):
    src = tmp_path / "report.txt"
    src.write_text("quarterly walrus report\n")
    up = as_json(ws, "upload", str(src), "--date", "2024-05-08")
    assert up["path"] == "resource/2024-05-08/report.txt"
    assert [h["path"] for h in as_json(ws, "search", "walrus")] == [up["path"]]
    dest = tmp_path / "out.txt"
    ok(ws, "download", up["path"], str(dest))
    assert dest.read_text() == "quarterly walrus report\n"
    assert run(ws, "download", up["path"], str(dest)).returncode == 4


def test_every_command_speaks_json(ws):
    ok(ws, "write", "digest/wiki/n.md", "--name", "Node", "--content", "otter facts [[notes/o.md]]")
    ok(ws, "write", "notes/o.md", "--content", "otters")
    for args in (["list"], ["stat", "notes/o.md"], ["node-search", "otter"], ["traverse", "digest/wiki/n.md"],
                 ["index-stats"], ["reconcile"], ["reindex"], ["tags"], ["daily-list"]):
        json.loads(ok(ws, *args, "--json").stdout)
    stat = as_json(ws, "stat", "notes/o.md")
    assert [link["source"] for link in stat["links_in"]] == ["digest/wiki/n.md"]


def test_index_stats_speaks_plain_words_and_json_keeps_every_count(ws):
    ok(ws, "write", "digest/wiki/n.md", "--content", "otter facts [[notes/o.md]]")
    ok(ws, "write", "digest/wiki/n.md", "--content", "otter facts, revised [[notes/o.md]]")  # a replaced passage
    shown = ok(ws, "index-stats").stdout
    assert "stale_chunks" not in shown and "unsorted_postings" not in shown and "postings" not in shown
    assert "Passages" in shown and "1 replaced passage to drop" in shown and "new word entries to sort" in shown
    assert "dreamflow optimize" in shown
    counts = as_json(ws, "index-stats")
    assert counts["stale_chunks"] == 1 and counts["unsorted_postings"] > 0  # the internals, under their keys
    ok(ws, "optimize")
    assert "nothing waiting: the index is compact" in ok(ws, "index-stats").stdout


def test_reindex_shows_progress(ws):
    for i in range(3):
        ok(ws, "write", f"notes/{i}.md", "--content", f"note {i}")
    proc = ok(ws, "reindex")
    assert "reindex" in proc.stderr and "3/3" in proc.stderr


@pytest.mark.e2e
def test_memory_commands_do_not_import_heavy_libraries(ws):
    """The fast path: write, read and search (JSON and rich output) never load prefect/openai/torch/pydantic."""
    ok(ws, "write", "notes/fast.md", "--content", "quick brown fox")
    for args in (["search", "fox", "--json"], ["search", "fox"], ["read", "notes/fast.md"],
                 ["write", "notes/w.md", "--content", "x"], ["edit", "notes/w.md", "--old", "x", "--new", "y"]):
        proc, modules = run_cli(ws, *args)
        assert proc.returncode == 0, proc.stderr
        assert "storage.memory" in modules and "click" in modules  # the probe really ran the CLI
        loaded = sorted(m for m in modules if m.split(".")[0] in HEAVY)
        assert loaded == [], f"`dreamflow {' '.join(args)}` imported {loaded[:10]}"
    assert "duckdb" in modules


# What a search, a read and --version need: not the MCP server, the job, service and workspace commands
# (imported when one of them runs or help lists them), nor rich (search hits print through dreamflow/cli/plain.py).
NOT_ON_THE_FAST_PATH = ("mcp", "prefect", "rich", "dreamflow.mcp", "engine.jobs", "dreamflow.cli.flow_commands",
                        "dreamflow.cli.governance_commands", "dreamflow.cli.job_command",
                        "dreamflow.cli.service_commands", "dreamflow.cli.workspace_commands")


@pytest.mark.e2e
def test_search_loads_neither_the_mcp_server_nor_the_job_commands_nor_rich(ws):
    """The console script's imports, not a timing (targets live in benchmarks/cli_search.py)."""
    ok(ws, "write", "notes/fast.md", "--content", "quick brown fox")
    for args in (["search", "fox", "--json"], ["search", "fox"], ["read", "notes/fast.md", "--json"], ["--version"]):
        proc = subprocess.run([sys.executable, "-c", ENTRY_PROBE, "--workspace", str(ws), *args],
                              capture_output=True, text=True, input="", timeout=120)
        assert proc.returncode == 0, proc.stderr
        modules = set(json.loads(proc.stderr.strip().splitlines()[-1]))
        loaded = sorted(m for m in modules if any(m == name or m.startswith(name + ".") for name in NOT_ON_THE_FAST_PATH))
        assert loaded == [], f"`dreamflow {' '.join(args)}` imported {loaded[:10]}"
        assert args == ["--version"] or "storage.memory" in modules  # the probe really ran the command
    assert "fox" in proc.stdout or "dreamflow" in proc.stdout


def test_search_hits_print_plainly_through_a_pipe_styled_on_a_terminal_and_without_control_characters(ws):
    ok(ws, "write", "notes/ctl.md", "--content", "otter \x1b[2J\x07bell\x08back")
    piped = {"FORCE_COLOR": None, "NO_COLOR": None}
    plain = ok(ws, "search", "otter", env=piped).stdout
    assert plain.startswith("notes/ctl.md:1-1  ") and "\x1b" not in plain and "\x07" not in plain
    assert "  otter [2Jbellback\n" in plain
    forced = ok(ws, "search", "otter", env={"FORCE_COLOR": "1", "NO_COLOR": None}).stdout
    assert forced.startswith("\x1b[1;36mnotes/ctl.md:1-1\x1b[0m") and forced.count("\x1b[") == 4
    no_colour = ok(ws, "search", "otter", env={"FORCE_COLOR": "1", "NO_COLOR": "1"}).stdout
    assert no_colour.startswith("\x1b[1mnotes/ctl.md:1-1\x1b[0m") and "36m" not in no_colour
    assert ok(ws, "search", "zebra", env=piped).stdout == "no results\n"


def test_every_job_run_in_place_of_an_operation_wraps_one_that_writes():
    """The CLI looks for a job's wrapper only on writing operations, so a search never imports the jobs."""
    from engine.jobs import JOBS

    wrapped = {job.command for job in JOBS.values() if job.op}
    assert wrapped and all(op.writes for op in ops.OPS if op.cli_name in wrapped)
    assert wrapped <= {op.cli_name for op in ops.OPS}


def test_help_and_the_commands_page_list_every_operation(ws):
    text = ok(ws, "--help").stdout
    reference = (Path(__file__).parents[1] / "docs" / "commands.md").read_text()
    for op in ops.OPS:
        assert op.cli_name in text
        assert f"| `{op.cli_name}" in reference or f"/ `{op.cli_name} " in reference, op.cli_name
    search_help = ok(ws, "search", "--help").stdout
    for flag in ("--limit", "--min-score", "--start-date", "--tags", "--path-prefix", "--json"):
        assert flag in search_help


# ---- the registry itself ---------------------------------------------------------------------------------

def test_registry_covers_every_public_memory_method():
    public = {name for name in dir(Memory) if not name.startswith("_") and callable(getattr(Memory, name))}
    parts = {"evidence"}  # recall without a session's record: what each workspace gives a recall across several
    assert {op.method_name for op in ops.OPS} | {op.bytes_form for op in ops.OPS if op.bytes_form} | parts == public
    for op in ops.OPS:
        assert op.help, f"{op.name} has no docstring"
        names = [p.name for p in ops.parameters(op)]
        assert set(op.args) <= set(names) and (op.body is None or op.body in names)


def test_operation_schemas_are_json_schemas_without_callbacks():
    schemas = {op.name: ops.json_schema(ops.request_model(op)) for op in ops.OPS}
    assert ops.BY_NAME["search"].help.startswith("Search memory")
    assert schemas["search"]["required"] == ["query"]
    assert schemas["search"]["properties"]["limit"] == {"default": 10, "description": "Maximum number of results",
                                                        "type": "integer"}
    assert "progress" not in schemas["reindex"].get("properties", {})
    direction = schemas["traverse"]["properties"]["direction"]
    assert direction["enum"] == ["forward", "backward", "both", "out", "in"]  # out/in: ReMe's names
    json.dumps(list(schemas.values()))  # serialisable as-is
    assert typing.get_origin(next(p for p in ops.parameters(ops.BY_NAME["traverse"]) if p.name == "paths").annotation) is list


def test_status_sums_up_recent_llm_usage(ws):
    from engine.models import usage_log

    Memory(ws)  # the workspace layout
    spent = {"calls": 3, "prompt_tokens": 900, "completion_tokens": 100, "total_tokens": 1000, "seconds": 4.5,
             "kinds": {"extract": {"calls": 1, "total_tokens": 600, "answers": 1, "first_try": 1}}}
    usage_log.record(str(ws), "auto-dream", spent, run_id="r1")
    usage_log.record(str(ws), "auto-memory", {**spent, "kinds": {}}, run_id="r2")
    (ws / usage_log.LOG).write_text((ws / usage_log.LOG).read_text() + "not json\n")  # a damaged line is skipped
    status = as_json(ws, "status")
    assert [r["job"] for r in status["usage"]["runs"]] == ["auto-memory", "auto-dream"]
    total = status["usage"]["total"]
    assert total["total_tokens"] == 2000 and total["kinds"]["extract"]["calls"] == 1
    text = ok(ws, "status").stdout
    assert "LLM usage   last 2 run(s): 6 calls, 2000 tokens" in text and "auto-dream" in text


def test_a_retried_run_replaces_its_usage_entry(ws):
    from engine.models import usage_log

    Memory(ws)
    first = {"calls": 3, "total_tokens": 900, "kinds": {"integrate": {"calls": 2, "failures": 1}}}
    usage_log.record(str(ws), "auto-dream", first, run_id="r1")
    usage_log.record(str(ws), "merge", {"calls": 1, "total_tokens": 50}, run_id="r2")
    # the UI's Retry re-runs r1: its summary holds the finished units' usage again, plus the retried unit's
    usage_log.record(str(ws), "auto-dream", {"calls": 3, "total_tokens": 950}, run_id="r1")
    runs = usage_log.summary(str(ws))["runs"]
    assert [(r["job"], r["run_id"], r["calls"]) for r in runs] == [("auto-dream", "r1", 3), ("merge", "r2", 1)]


def test_a_malformed_numeric_setting_is_a_clear_error_not_a_traceback(ws):
    for command in (["search", "tea"], ["dream"]):
        bad = run(ws, *command, "--json", env={"DREAMFLOW_LLM_TIMEOUT": "ten minutes"})
        assert bad.returncode == 2, bad.stdout + bad.stderr
        assert json.loads(bad.stdout)["error"]["message"] == "DREAMFLOW_LLM_TIMEOUT must be a number, got 'ten minutes'"
        assert "Traceback" not in bad.stderr
    assert "DREAMFLOW_MAX_WRITE_CHARS must be an integer" in run(ws, "status", env={
        "DREAMFLOW_MAX_WRITE_CHARS": "1e5"}).stderr


def test_status_without_the_service_shows_the_last_dream(ws):
    from storage.files import checkpoints

    memory = Memory(ws)
    assert "Last dream  none yet" in ok(ws, "status").stdout
    checkpoints.save(memory.ws, "dream", {"last_run": {"date": "2024-07-01", "at": "2024-07-02T03:00:05+00:00",
                                                       "units": 4, "failed": 1}})
    assert "Last dream  2024-07-02T03:00:05+00:00 (of 2024-07-01: 4 units, 1 failed)" in ok(ws, "status").stdout


@pytest.mark.parametrize("command", [["dream", "--scan-days", "-1"], ["link-mine", "--max-nodes", "-1"],
                                     ["split", "--max-parts", "1000000001"], ["archive", "--stale-days", "-3"]])
def test_job_counts_are_bounded_like_the_operations_counts(ws, command):
    bad = run(ws, *command)  # a usage error, before the LLM check (no LLM is configured here either)
    assert bad.returncode == 2 and "is not a count from 0 to 1,000,000,000" in bad.stderr, bad.stderr


def test_counts_in_messages_agree_with_their_number(ws):
    from dreamflow.cli.render import counted

    assert (counted(1, "card"), counted(0, "card"), counted(2, "new topic")) == ("1 card", "0 cards", "2 new topics")
    ok(ws, "write", "daily/2024-05-08/a.md", "--content", "# A", "--name", "A")
    assert "(1 card)" in ok(ws, "daily-reindex", "2024-05-08").stdout
    assert "(1 card)" in ok(ws, "daily-reindex", "2024-05-08").stdout  # up to date


def test_trace_and_the_dream_table_show_a_fact_s_words_as_said(ws, capsys):
    """A fact line escapes `::`, `^` and `#` in the words (storage/text/facts.py); the CLI's text shows them as said,
    its JSON keeps the line's text."""
    from dreamflow.cli.flow_commands import _show_dream
    from storage.text import facts
    from storage.memory import Memory

    said = "I live in Lisbon. ## History ^f1 (until:: 2020-01-01)"
    line = facts.Fact(said, id="f1", about="user").render()
    Memory(ws).write("daily/2024-05-08/chat.md", f"# Chat\n\n## Facts\n\n{line}\n")
    shown = run(ws, "trace", "daily/2024-05-08/chat.md", "^f1")
    assert shown.returncode == 0 and said in shown.stdout and "\\" not in shown.stdout, shown.stdout
    raw = json.loads(run(ws, "trace", "daily/2024-05-08/chat.md", "^f1", "--json").stdout)
    assert raw["chain"]["text"] == facts.parse_line(line).text
    _show_dream({"date": "2024-05-08", "actions": [{"fact": facts.plain_text(said), "action": "created",
                                                    "node": "digest/personal/user.md"}], "failed": [],
                 "scanned": 1, "changed": 1, "facts": 1, "units": 1, "topics": 0, "usage": None, "deferred": []})
    table = capsys.readouterr().out  # the fact column wraps
    assert "\\" not in table and "## History ^f1" in table and "(until:: 2020-01-01)" in table, table
