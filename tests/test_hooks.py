"""`dreamflow hook claude-code` on a transcript in Claude Code's format (tests/fixtures/claude_code_transcript.jsonl:
meta and local-command records, thinking, streamed assistant pieces, tool_use/tool_result, a base64 image, a
system reminder, a sidechain, an interruption, summary/snapshot/system records and a compaction summary; and
records built by `line` in the same format: slash commands, `<synthetic>` answers, hostile and huge transcripts)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_probe import PROBE, RSS_PROBE
from llm_server import answer_by_message, fact
from service_harness import DREAMFLOW, wait_for
from test_cli import invoke

pytestmark = pytest.mark.timeout(240)

FIXTURE = Path(__file__).parent / "fixtures" / "claude_code_transcript.jsonl"
SESSION = "5f0c2a9e-8d41-4c7a-9b2e-3d6f1a7c9e02"
FIRST_DELIVERY = 13  # lines of the transcript written when the first Stop fires


def fixture_lines() -> list[str]:
    return FIXTURE.read_text().splitlines(keepends=True)




def hook(workspace, payload, raw: str | None = None, verbose: bool = True, env: dict | None = None,
         probe: str | None = None) -> subprocess.CompletedProcess:
    """`dreamflow --workspace WS hook claude-code` with the payload on stdin: in this process (test_cli.invoke), or
    with a `probe` (cli_probe) in a real process that reports on itself."""
    args = ["--workspace", str(workspace), "hook", "claude-code", *(["--verbose"] * verbose)]
    stdin = raw if raw is not None else json.dumps(payload)
    if probe is None:
        return invoke(args, input=stdin, env=env)
    return subprocess.run([sys.executable, "-c", probe, *args], input=stdin, capture_output=True, text=True,
                          timeout=60, env={**os.environ, **(env or {})})


def line(kind: str, uuid: str, content, message_id: str | None = None, model: str = "claude-opus-4-5-20251101",
         **extra) -> str:
    """One transcript line as Claude Code writes it (`type` user/assistant, `message` with role and content)."""
    message = {"role": kind, "content": content}
    if kind == "assistant":
        message = {"model": model, "id": message_id or f"msg_{uuid}", "type": "message", **message,
                   "stop_reason": None, "usage": {"input_tokens": 10, "output_tokens": 5}}
    return json.dumps({"parentUuid": None, "isSidechain": False, "cwd": "/home/ana/trip-planner", "sessionId": SESSION,
                       "version": "2.1.12", "userType": "external", "type": kind, "uuid": uuid,
                       "timestamp": "2024-05-09T10:00:00.000Z", "message": message, **extra}) + "\n"


def exchange(i: int, filler: int = 0) -> str:
    """Prompt i, `filler` tiny records Claude Code writes between (progress), and the answer."""
    noise = "".join(json.dumps({"type": "progress", "uuid": f"p-{i}-{n}", "data": {"n": n}}) + "\n"
                    for n in range(filler))
    return (line("user", f"u-{i}", f"prompt {i}: what about day {i}?") + noise
            + line("assistant", f"a-{i}", [{"type": "text", "text": f"answer {i}"}]))


def deliver_all(ws, transcript: Path, env: dict, most: int = 30, probe: str | None = None) -> list:
    """Deliver Stop until nothing is left for a next delivery: the finished hooks."""
    done = []
    while len(done) < most:
        done.append(hook(ws, payload(transcript), env=env, probe=probe))
        assert done[-1].returncode == 0 and "Error" not in done[-1].stderr, done[-1].stderr
        if "left for the next delivery" not in done[-1].stderr:
            return done
    raise AssertionError(f"still not done after {most} deliveries")


def texts(workspace, role: str = "user") -> list[str]:
    """The text of each of the role's records, in order."""
    return [r["content"] if isinstance(r["content"], str) else "\n".join(b.get("text", "") for b in r["content"])
            for r in dialog(workspace) if r["role"] == role]


def payload(transcript: Path, event: str = "Stop", session: str = SESSION) -> dict:
    return {"session_id": session, "transcript_path": str(transcript), "cwd": "/home/ana/trip-planner",
            "hook_event_name": event, "stop_hook_active": False, "permission_mode": "default"}


def dialog(workspace, session: str = SESSION) -> list[dict]:
    path = workspace / f"session/dialog/{session}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def counted(workspace, session: str = SESSION) -> dict:
    path = workspace / "metadata/turns.json"
    return json.loads(path.read_text()).get(session, {}) if path.exists() else {}


def test_claude_code_transcript_is_captured_once_turn_by_turn(tmp_path):
    ws, transcript, lines = tmp_path / "ws", tmp_path / "claude" / f"{SESSION}.jsonl", fixture_lines()
    transcript.parent.mkdir()
    transcript.write_text("".join(lines[:FIRST_DELIVERY]))

    started = time.monotonic()
    first = hook(ws, payload(transcript))
    elapsed = time.monotonic() - started
    assert first.returncode == 0 and "2 turn(s)" in first.stderr, first.stderr
    records = dialog(ws)
    assert [r["role"] for r in records] == ["user", "user", "assistant", "assistant"]
    assert records[0]["content"] == "/model"  # the slash command is the user's words; its output is not
    assert records[1]["content"].startswith("I'm planning a trip to Lisbon")
    assert records[1]["created_at"].startswith("2024-05-08")
    streamed = records[2]["content"]  # msg_01A: thinking (dropped), text and tool_use on three lines, joined
    assert [b["type"] for b in streamed] == ["text", "tool_use"] and streamed[1]["name"] == "Read"
    assert "TAP 1357" in records[3]["content"][0]["text"]
    text = json.dumps(records)
    for absent in ("Caveat", "<command-name>", "local-command", "Set model to", "private reasoning", "tool_result",
                   "06:05 LHR-LIS", "Subagent scratch", "Lisbon trip planning with Ana"):
        assert absent not in text, absent
    assert counted(ws)["turns"] == 2
    assert elapsed < 10  # generous for a loaded machine; benchmarks/mcp.py has the figure

    again = hook(ws, payload(transcript))  # the same transcript delivered twice adds nothing
    assert again.returncode == 0 and dialog(ws) == records and counted(ws)["turns"] == 2

    rest = lines[FIRST_DELIVERY:]
    with transcript.open("a") as fh:  # the next turn, the compaction summary still being written
        fh.write("".join(rest[:-1]) + rest[-1][:40])
    second = hook(ws, payload(transcript))
    assert second.returncode == 0, second.stderr
    new = dialog(ws)[len(records):]
    assert [r["role"] for r in new] == ["user", "assistant", "assistant"]
    assert new[0]["content"] == [{"type": "text", "text": "Here is the hotel I like, Casa do Largo in Alfama. "
                                                         "Book-keeping: budget is 150 EUR a night."}]
    edit = new[1]["content"][1]
    assert edit["name"] == "Edit" and edit["input"]["new_string"].endswith("[...]") and len(edit["input"]["new_string"]) < 400
    text = json.dumps(new)
    for absent in ("base64", "iVBORw0KGgo", "system-reminder", "has been updated", "Request interrupted"):
        assert absent not in text, absent
    assert counted(ws)["turns"] == 3 and counted(ws)["pending"] == 3

    with transcript.open("a") as fh:  # the summary line completes; PreCompact fires (twice, as hosts do)
        fh.write(rest[-1][40:])
    for _ in range(2):
        compacting = hook(ws, payload(transcript, "PreCompact"))
        assert compacting.returncode == 0 and "0 message(s)" in compacting.stderr, compacting.stderr
    assert len(dialog(ws)) == 7 and counted(ws)["turns"] == 3
    checkpoint_path = ws / f"metadata/checkpoints/claude-code/{SESSION}.json"
    checkpoint = json.loads(checkpoint_path.read_text())
    assert checkpoint["offset"] == transcript.stat().st_size

    # a delivery that died after recording its turns left the old offset: the recorded uuids are skipped
    checkpoint_path.write_text(json.dumps({**checkpoint, "offset": 0}))
    assert hook(ws, payload(transcript)).returncode == 0
    assert len(dialog(ws)) == 7 and counted(ws)["turns"] == 3


def test_the_hook_never_fails_the_host(tmp_path):
    ws = tmp_path / "ws"
    for raw, expected in (("not json", "JSONDecodeError"), ("[1, 2]", "not a JSON object"),
                          (json.dumps(payload(tmp_path / "missing.jsonl")), "No such file"),
                          (json.dumps(payload(tmp_path / "t.jsonl", session="../escape")), "session id"),
                          (json.dumps({"session_id": SESSION, "hook_event_name": "Stop"}), "transcript_path")):
        proc = hook(ws, None, raw=raw)
        assert proc.returncode == 0 and expected in proc.stderr and proc.stdout == "", (raw, proc.stderr)
    os.mkfifo(tmp_path / "fifo")
    proc = hook(ws, payload(tmp_path / "fifo"))  # would block forever on open
    assert proc.returncode == 0 and "not a regular file" in proc.stderr, proc.stderr
    for event in ("UserPromptSubmit", "SubagentStop", "SessionStart", "Notification", None):
        other = hook(ws, {**payload(FIXTURE), "hook_event_name": event})
        assert other.returncode == 0 and dialog(ws) == [] and "Error" not in other.stderr, (event, other.stderr)


@pytest.mark.e2e
def test_precompact_summarises_now_through_the_service(dreamflow_service, llm_server, tmp_path):
    svc, session = dreamflow_service, "7d3e9b10-2c4f-4e55-a1b2-c3d4e5f6a7b8"
    transcript = tmp_path / f"{session}.jsonl"
    transcript.write_text("".join(fixture_lines()).replace(SESSION, session))
    answer_by_message(llm_server, "Lisbon with Ana",
                      ("vegetarian", fact("Ana is vegetarian and hates early flights.", about="Ana")),
                      ("Casa do Largo", fact("The hotel budget is 150 EUR a night.")))

    done = hook(svc.workspace, payload(transcript, "PreCompact", session=session))

    assert done.returncode == 0 and "3 turn(s)" in done.stderr, done.stderr
    assert counted(svc.workspace, session)["runs"] == 1  # the turn counter launched auto_memory at once
    runs = wait_for(lambda: [r for r in svc.flow_runs("auto-memory/turns")
                             if r["parameters"].get("session_id") == session and r["state_type"] in
                             {"COMPLETED", "FAILED", "CRASHED"}], 120, "the auto_memory run of the compaction")
    assert runs[0]["state_type"] == "COMPLETED", runs
    card = next((svc.workspace / "daily").glob("*/lisbon-with-ana.md")).read_text()
    assert "Ana is vegetarian and hates early flights." in card and "The hotel budget is 150 EUR a night." in card


@pytest.mark.e2e
def test_the_hook_imports_no_prefect_openai_or_torch(tmp_path):
    transcript = tmp_path / "t.jsonl"
    transcript.write_text("".join(fixture_lines()))
    proc = subprocess.run([sys.executable, "-c", PROBE, "--workspace", str(tmp_path / "ws"), "hook", "claude-code"],
                          input=json.dumps(payload(transcript)), capture_output=True, text=True, timeout=60)
    modules = set(json.loads(proc.stderr.strip().splitlines()[-1]))
    assert proc.returncode == 0 and len(dialog(tmp_path / "ws")) == 7
    assert not [m for m in modules if m.split(".")[0] in ("prefect", "openai", "torch", "sentence_transformers")]


def test_an_answer_written_after_its_stop_fired_counts_no_extra_turn(tmp_path):
    """Claude Code writes the transcript behind the Stop event: the end of a turn can arrive with the next one."""
    ws, transcript, record = tmp_path / "ws", tmp_path / f"{SESSION}.jsonl", line
    deliveries = [
        record("user", "u1", "Which tram goes to Alfama? Antwort bitte auf Deutsch, danke schön")
        + record("assistant", "a1", [{"type": "tool_use", "id": "t1", "name": "WebSearch", "input": {"q": "tram"}}], "m1"),
        record("user", "r1", [{"type": "tool_result", "tool_use_id": "t1", "content": "x" * 5000}])
        + record("assistant", "a2", [{"type": "text", "text": "Die Linie 28E fährt nach Alfama."}], "m2"),
        record("user", "u2", "And back to Baixa?") + record("assistant", "a3", "Also the 28E.", "m3"),
    ]
    for lines in deliveries:
        with transcript.open("a") as fh:
            fh.write(lines)
        done = hook(ws, payload(transcript))
        assert done.returncode == 0 and done.stderr.count("dreamflow hook claude-code") == 1, done.stderr

    records = dialog(ws)
    assert [r["role"] for r in records] == ["user", "assistant", "assistant", "user", "assistant"]
    assert "28E fährt" in json.dumps(records, ensure_ascii=False) and "x" * 100 not in json.dumps(records)
    assert counted(ws)["turns"] == 2  # one per user prompt, not one more for the late answer
    assert hook(ws, payload(transcript)).returncode == 0 and len(dialog(ws)) == 5


def test_a_record_nested_2000_deep_is_skipped_and_capture_goes_on(tmp_path):
    ws, transcript = tmp_path / "ws", tmp_path / f"{SESSION}.jsonl"
    deep = "[" * 2000 + "]" * 2000  # json.loads raises RecursionError on it
    nested = json.loads(line("assistant", "a-deep", [{"type": "tool_use", "id": "t", "name": "Edit", "input": {}}]))
    value: list = []
    nested["message"]["content"][0]["input"] = {"a": value}
    for _ in range(900):  # parses, but deeper than any later step should walk
        value.append([])
        value = value[0]
    transcript.write_text(exchange(0) + deep + "\n"
                          + '{"type": "user", "uuid": "u-deep", "message": ' + "[" * 1500 + "]" * 1500 + "}\n"
                          + json.dumps(nested) + "\n"
                          + line("user", "u-odd", [{"type": ["text"], "text": "x"}], timestamp=[[[]]]) + exchange(1))
    first = hook(ws, payload(transcript))
    assert first.returncode == 0 and "skipped 3 unreadable record(s)" in first.stderr, first.stderr
    assert "RecursionError" not in first.stderr
    assert texts(ws) == ["prompt 0: what about day 0?", "prompt 1: what about day 1?"]
    assert "[...]" in json.dumps(dialog(ws)) and len(json.dumps(dialog(ws))) < 5000  # the 900-deep input, cut
    with transcript.open("a") as fh:
        fh.write(exchange(2))
    second = hook(ws, payload(transcript))  # the session is captured again
    assert second.returncode == 0 and "1 turn(s)" in second.stderr and "unreadable" not in second.stderr, second.stderr
    assert texts(ws)[-1] == "prompt 2: what about day 2?" and counted(ws)["turns"] == 3


@pytest.mark.e2e
def test_a_huge_transcript_goes_in_bounded_deliveries_without_duplicates(tmp_path):
    """20 prompts among 60,000 tiny records (3.3 MB): each delivery reads at most 1 MB or 6 turns, its memory
    stays flat, and the deliveries together take every turn once."""
    ws, transcript = tmp_path / "ws", tmp_path / f"{SESSION}.jsonl"
    small = tmp_path / "small.jsonl"
    small.write_text(exchange(0))
    baseline = hook(ws, payload(small, session="baseline"), probe=RSS_PROBE)
    base_rss = int(baseline.stderr.split("maxrss")[-1])
    over = "x" * 300_000
    with transcript.open("w") as fh:
        for i in range(20):
            fh.write(exchange(i, filler=3000))
            if i == 10:  # over DREAMFLOW_HOOK_MAX_LINE_BYTES: skipped and reported, the turns around it kept
                fh.write(line("user", "u-long", over))
    env = {"DREAMFLOW_HOOK_MAX_BYTES": str(1 << 20), "DREAMFLOW_HOOK_MAX_TURNS": "6",
           "DREAMFLOW_HOOK_MAX_LINE_BYTES": "100000", "DREAMFLOW_HOOK_MAX_SECONDS": "60"}
    done = deliver_all(ws, transcript, env, probe=RSS_PROBE)

    assert len(done) >= 4, [d.stderr for d in done]  # 3.3 MB at 1 MB per delivery
    assert sum("skipped 1 line(s) over" in d.stderr for d in done) == 1
    assert texts(ws) == [f"prompt {i}: what about day {i}?" for i in range(20)]
    assert texts(ws, "assistant") == [f"answer {i}" for i in range(20)]
    assert counted(ws)["turns"] == 20
    peaks = [int(d.stderr.split("maxrss")[-1]) for d in done]
    assert max(peaks) < base_rss + 30_000, (base_rss, peaks)  # kB: nothing like the transcript's size


def test_a_delivery_killed_between_recording_and_its_checkpoint_duplicates_nothing(tmp_path):
    """The state a kill leaves after record_turn and before the checkpoint save (dialog and counter moved on,
    checkpoint not), made exactly; then the same with the turn's answer grown meanwhile."""
    ws, transcript = tmp_path / "ws", tmp_path / f"{SESSION}.jsonl"
    checkpoint = ws / f"metadata/checkpoints/claude-code/{SESSION}.json"
    transcript.write_text(exchange(0))
    assert hook(ws, payload(transcript)).returncode == 0
    before = checkpoint.read_text()
    with transcript.open("a") as fh:
        fh.write(line("user", "u-1", "prompt 1") + line("assistant", "a-1a", "part one", message_id="m1"))
    assert hook(ws, payload(transcript)).returncode == 0
    assert len(dialog(ws)) == 4 and counted(ws)["turns"] == 2

    checkpoint.write_text(before)  # killed before the checkpoint of turn 1 was saved
    assert hook(ws, payload(transcript)).returncode == 0
    assert len(dialog(ws)) == 4 and counted(ws)["turns"] == 2

    checkpoint.write_text(before)  # killed again, and the answer went on meanwhile
    with transcript.open("a") as fh:
        fh.write(line("assistant", "a-1b", "part two", message_id="m2"))
    assert hook(ws, payload(transcript)).returncode == 0
    assert [r["content"] for r in dialog(ws)][2:] == ["prompt 1", "part one", "part two"]
    assert counted(ws)["turns"] == 2


@pytest.mark.e2e
def test_deliveries_sigkilled_mid_way_duplicate_and_lose_nothing(tmp_path):
    ws, transcript = tmp_path / "ws", tmp_path / f"{SESSION}.jsonl"
    transcript.write_text("".join(exchange(i) for i in range(30)))
    dialog_file = ws / f"session/dialog/{SESSION}.jsonl"
    for at in (6, 25):  # kill once the dialog holds this many lines
        proc = subprocess.Popen([DREAMFLOW, "--workspace", str(ws), "hook", "claude-code"], stdin=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True, env=os.environ)
        proc.stdin.write(json.dumps(payload(transcript)))
        proc.stdin.close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            if dialog_file.exists() and dialog_file.read_bytes().count(b"\n") >= at:
                break
            time.sleep(0.002)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert 6 <= len(dialog(ws)) < 60
    deliver_all(ws, transcript, {})
    assert texts(ws) == [f"prompt {i}: what about day {i}?" for i in range(30)]
    assert len(dialog(ws)) == 60 and counted(ws)["turns"] == 30


def test_slash_commands_are_the_users_words_and_synthetic_answers_are_dropped(tmp_path):
    ws, transcript = tmp_path / "ws", tmp_path / f"{SESSION}.jsonl"
    transcript.write_text(
        line("assistant", "a-0", "Resumed: where were we?")  # no prompt before it: appended, never counted
        + line("user", "c-1", "<command-message>review-pr is running…</command-message>\n"
                              "<command-name>/review-pr</command-name>\n<command-args>123 --strict</command-args>")
        + line("user", "c-2", [{"type": "text", "text": "Review the pull request given in ARGUMENTS: 123 --strict."}],
               isMeta=True)  # the expanded command body
        + line("assistant", "c-3", [{"type": "text", "text": "PR 123 renames the booking module."}])
        + line("user", "c-4", [{"type": "text", "text": "<command-name>/plan</command-name>\n            "
                                                       "<command-message>plan</command-message>\n            "
                                                       "<command-args>a weekend in Porto</command-args>"}])
        + line("assistant", "c-5", "Day one: Ribeira.")
        + line("user", "c-6", "Caveat: The messages below were generated by the user while running local commands.",
               isMeta=True)
        + line("user", "c-7", "<local-command-stdout>Set model to opus</local-command-stdout>")
        + line("assistant", "c-8", [{"type": "text", "text": "No response requested."}], model="<synthetic>"))
    done = hook(ws, payload(transcript))
    assert done.returncode == 0 and "2 turn(s)" in done.stderr, done.stderr
    assert texts(ws) == ["/review-pr 123 --strict", "/plan a weekend in Porto"]
    assert counted(ws)["turns"] == 2
    text = json.dumps(dialog(ws))
    for absent in ("No response requested", "Set model", "Caveat", "ARGUMENTS", "<command"):
        assert absent not in text, absent
    assert "Resumed: where were we?" in text and "Ribeira" in text


def test_session_end_without_a_transcript_is_silent(tmp_path):
    ws = tmp_path / "ws"
    done = hook(ws, payload(tmp_path / "never-written.jsonl", "SessionEnd"), verbose=False)
    assert done.returncode == 0 and done.stderr == "" and done.stdout == "", done.stderr


def test_a_session_id_with_a_trailing_newline_is_refused(tmp_path):
    ws, transcript = tmp_path / "ws", tmp_path / "t.jsonl"
    transcript.write_text(exchange(0))
    done = hook(ws, payload(transcript, session=SESSION + "\n"))
    assert done.returncode == 0 and "session id" in done.stderr, done.stderr
    assert not [p for p in ws.rglob("*") if "\n" in p.name]
