"""The CLI flow commands (`dreamflow dream`, `auto-memory`, `auto-resource`, `proactive`) in-process."""

import json

from click.testing import CliRunner

from dreamflow.cli import cli
from llm_server import json_reply
from storage.memory import Memory

DAY = "2024-05-08"


def run(ws, *args):
    return CliRunner().invoke(cli, ["--workspace", str(ws.root), *args], catch_exceptions=False)


def test_no_llm_is_a_clear_error_before_prefect_starts(no_llm, ws):
    result = run(ws, "dream", "--date", DAY)
    assert result.exit_code == 6 and "DREAMFLOW_LLM_BASE_URL" in result.output
    result = run(ws, "auto-memory", "--session-id", "s1", "--messages", "[{not json", "--json")
    assert result.exit_code == 2 and "not valid JSON" in result.output


def test_auto_memory_and_dream_commands(prefect_harness, llm, ws, monkeypatch):
    monkeypatch.setenv("DREAMFLOW_EMBEDDER", "none")
    llm.on("list the facts worth remembering", json_reply({"title": "Piano", "facts": [
        {"text": "The user starts piano lessons on Tuesday.", "about": "user", "kind": "plan",
         "source": [1]},
        {"text": "The user owns a violin.", "about": "user", "kind": "fact", "source": [1]}]}))
    messages = json.dumps([{"role": "user", "content": "I start piano lessons on Tuesday",
                            "created_at": f"{DAY}T09:00:00"}])
    result = run(ws, "auto-memory", "--session-id", "s1", "--messages", messages, "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["card"] == f"daily/{DAY}/piano.md" and out["facts"] == 1 and out["dropped"][0]["rule"] == "ungrounded"
    result = run(ws, "auto-memory", "--session-id", "s1")
    assert result.exit_code == 0 and "no new messages" in result.output

    Memory(ws.root).write("digest/personal/user.md", "# The user\n\n## Plans\n\n- The user plays piano lessons "
                          "on Mondays. (since:: 2024-01-01) ^f1\n", metadata={"about": "user"})
    llm.on("You keep a memory of facts up to date", json_reply({"nonsense": True}), json_reply({"still": "nonsense"}))
    result = run(ws, "dream", "--date", DAY, "--scan-days", "1")
    assert result.exit_code == 9  # a failed unit: the summary is printed, the exit code says it
    assert "FAILED" in result.output and "1 failed" in result.output and f"daily/{DAY}/piano.md" in result.output


def test_proactive_command_runs_without_prefect(ws):
    ws.write_text(f"daily/{DAY}/interests.yaml", "topics:\n  - title: Piano recital\n    reason: in two weeks\n")
    result = run(ws, "proactive", "--date", DAY, "--json")
    assert json.loads(result.output)["topics"][0]["title"] == "Piano recital"
    assert "no topics" in run(ws, "proactive", "--date", "2024-05-09").output


def test_auto_resource_of_a_missing_path_is_not_found(prefect_harness, llm, ws):
    result = run(ws, "auto-resource", "resource/no-such-file.md")
    assert result.exit_code == 3, result.output
    assert "resource/no-such-file.md not found" in result.output and "action" not in result.output
    assert llm.requests == []
