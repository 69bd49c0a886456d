"""Recording turns: threshold, compact, persistence across instances, failed launches kept pending, retries."""

import json

import pytest

from engine.access.turns import TurnCounter, check_session_id, record_turn
from storage.errors import InvalidInput


class Sessions:
    """Records turns as the service does (its open memory and counter, `launch`) and the launches made."""

    def __init__(self, ws):
        from engine.access.client import local_memory

        self.ws = ws
        self.memory = local_memory(ws.root)
        self.launches: list[str] = []
        self.fail = False

    def record(self, counter, session_id, messages, compact=False, launches=True):
        return record_turn(self.ws.root, session_id, messages, compact, memory=self.memory, counter=counter,
                           launch=self.launch if launches else None)

    def launch(self, session_id):
        if self.fail:
            raise ConnectionError("prefect api down")
        self.launches.append(session_id)
        return f"run-{len(self.launches)}"


def turn(n):
    return [{"role": "user", "content": f"q{n}"}, {"role": "assistant", "content": f"a{n}"}]


def test_every_n_turns_launches_once_and_records_are_appended(ws):
    s, counter = Sessions(ws), TurnCounter(ws, every=3)
    results = [s.record(counter, "chat-1", turn(i)) for i in range(7)]
    assert s.launches == ["chat-1", "chat-1"]
    assert [r["launched"] for r in results] == [None, None, "run-1", None, None, "run-2", None]
    assert results[-1]["pending"] == 1 and results[-1]["turns"] == 7
    lines = (ws.root / "session/dialog/chat-1.jsonl").read_text().splitlines()
    assert len(lines) == 14


def test_sessions_count_separately_and_counts_survive_a_new_counter(ws):
    s = Sessions(ws)
    first = TurnCounter(ws, every=2)
    s.record(first, "a", turn(1))
    s.record(first, "b", turn(1))
    again = TurnCounter(ws, every=2)  # as after a service restart
    out = s.record(again, "a", turn(2))
    assert out["launched"] == "run-1" and s.launches == ["a"]
    assert again.sessions()["b"]["pending"] == 1


def test_compact_launches_now_even_without_new_messages(ws):
    s, counter = Sessions(ws), TurnCounter(ws, every=10)
    s.record(counter, "a", turn(1))
    out = s.record(counter, "a", [], compact=True)
    assert out["launched"] == "run-1" and out["appended"] == 0 and out["pending"] == 0


def test_failed_launch_keeps_turns_pending_and_the_next_turn_retries(ws):
    s, counter = Sessions(ws), TurnCounter(ws, every=2)
    s.record(counter, "a", turn(1))
    s.fail = True
    out = s.record(counter, "a", turn(2))
    assert out["launched"] is None and "prefect api down" in out["launch_error"] and out["pending"] == 2
    assert counter.due_sessions() == ["a"]
    s.fail = False
    out = s.record(counter, "a", turn(3))
    assert out["launched"] == "run-1" and out["pending"] == 0
    assert counter.due_sessions() == []


def test_without_a_launcher_due_sessions_wait_for_the_service(ws):
    s, counter = Sessions(ws), TurnCounter(ws, every=1)
    out = s.record(counter, "a", turn(1), launches=False)
    assert out["launched"] is None and "dreamflow start" in out["waiting"]
    assert TurnCounter(ws, every=1).due_sessions() == ["a"]


def test_damaged_state_file_restarts_counting(ws):
    (ws.metadata / "turns.json").write_text("{not json")
    s, counter = Sessions(ws), TurnCounter(ws, every=5)
    assert s.record(counter, "a", turn(1))["turns"] == 1


@pytest.mark.parametrize("bad", ["", "../x", "a/b", ".hidden", "x" * 200, None, "chat-1\n", "chat-1\r\n", "\nchat"])
def test_bad_session_ids_are_refused(bad):
    with pytest.raises(InvalidInput):
        check_session_id(bad)


def test_bad_messages_are_refused_before_anything_is_written(ws):
    s, counter = Sessions(ws), TurnCounter(ws, every=5)
    with pytest.raises(InvalidInput):
        s.record(counter, "a", {"role": "user"})
    with pytest.raises(InvalidInput):
        s.record(counter, "a", [])
    assert counter.sessions() == {}


def test_a_turn_sent_again_with_its_turn_id_is_recorded_once(ws):
    """What a retried hook delivery sends: the same turn_id and message ids, perhaps with more of the answer."""
    record = record_turn  # no service: in-process, a due run waits for it

    def dialog() -> list[dict]:
        return [json.loads(line) for line in (ws.root / "session/dialog/s.jsonl").read_text().splitlines()]

    prompt = [{"role": "user", "content": "Which tram?", "id": "u1"},
              {"role": "assistant", "content": "28E", "id": "a1"}]
    assert record(ws.root, "s", prompt, turn_id="u1")["turns"] == 1
    assert record(ws.root, "s", prompt, turn_id="u1")["appended"] == 0
    grown = record(ws.root, "s", [*prompt, {"role": "assistant", "content": "Every 10 min.", "id": "a2"}], turn_id="u1")
    assert grown["appended"] == 1 and grown["turns"] == 1
    rest = record(ws.root, "s", [{"role": "assistant", "content": "From Martim Moniz.", "id": "a3"}], turn_id="a3")
    assert rest["appended"] == 1 and rest["turns"] == 1  # no user message: the end of a turn, not a new one
    assert [r["id"] for r in dialog()] == ["u1", "a1", "a2", "a3"]
    assert record(ws.root, "s", [{"role": "user", "content": "Thanks"}])["turns"] == 2  # without ids: as before


@pytest.mark.e2e
def test_the_mcp_turn_tool_and_the_cli_take_turn_id_too(ws):
    """The same retry as above through the MCP target (`dreamflow mcp`, no service) and `dreamflow turn`."""
    import os
    import subprocess
    import sys

    from dreamflow.mcp.targets import WorkspaceTarget

    target = WorkspaceTarget(ws.root)
    prompt = [{"role": "user", "content": "Which ferry?", "id": "u1"}]
    assert target.turn("m", prompt, turn_id="u1")["turns"] == 1
    again = target.turn("m", prompt, turn_id="u1")
    assert again["appended"] == 0 and again["turns"] == 1

    env = {k: v for k, v in os.environ.items() if k != "DREAMFLOW_WORKSPACE"}
    args = [sys.executable, "-m", "dreamflow", "--workspace", str(ws.root), "turn", "--session-id", "c",
            "--messages", json.dumps([{"role": "user", "content": "Which tram?", "id": "u2"}]), "--turn-id", "u2",
            "--json"]
    first, second = (json.loads(subprocess.run(args, env=env, capture_output=True, text=True, check=True,
                                               timeout=120).stdout) for _ in range(2))
    assert (first["turns"], first["appended"]) == (1, 1) and (second["turns"], second["appended"]) == (1, 0)
