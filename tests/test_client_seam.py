"""The one client seam (engine/access/client.py): one choice per process and workspace, one interface, a turn recorded
once; the same turn through the running service is in tests/test_service.py."""

import json
import os

from engine.access.client import RemoteMemory, open_memory, reopen, service_for

TURN = [{"role": "user", "content": "I moved to Porto yesterday", "id": "u1"},
        {"role": "assistant", "content": "Noted: Porto.", "id": "a1"}]


def _dialog(ws, session):
    return [json.loads(line) for line in (ws.root / f"session/dialog/{session}.jsonl").read_text().splitlines()]


def _turns(ws, session):
    return json.loads((ws.root / "metadata/turns.json").read_text())[session]["turns"]


def test_the_choice_is_made_once_per_process_and_workspace(ws):
    first = open_memory(ws.root)
    assert first is open_memory(ws.root) is open_memory(str(ws.root) + "/")  # one object, however the folder is spelt
    assert service_for(ws.root) is None and not isinstance(first, RemoteMemory)


def test_a_turn_without_the_service_is_recorded_once(ws):
    memory = open_memory(ws.root)
    result = memory.turn("porto", TURN, turn_id="u1")
    assert result["appended"] == 2 and result["turns"] == 1
    assert [r["content"] for r in _dialog(ws, "porto")] == [m["content"] for m in TURN]
    assert _turns(ws, "porto") == 1
    again = memory.turn("porto", TURN, turn_id="u1")  # the same turn delivered again (a hook killed before its save)
    assert again["appended"] == 0 and again["turns"] == 1
    assert len(_dialog(ws, "porto")) == 2 and _turns(ws, "porto") == 1


def test_a_service_started_or_stopped_later_moves_the_choice(ws):
    """A long-lived process (the stdio MCP server) follows service.json: a service started later takes over at
    once, and without it the process works in the workspace again."""
    from test_api import ApiServer

    from storage.memory import Memory

    local = open_memory(ws.root)
    local.write("notes/a.md", "alpha\n")
    server = ApiServer(Memory(ws.root))
    try:
        ws.write_text("metadata/service.json", json.dumps({"url": server.url, "pid": os.getpid()}))
        remote = open_memory(ws.root)
        assert isinstance(remote, RemoteMemory) and service_for(ws.root) is remote
        assert [e["path"] for e in remote.list("notes")["entries"]] == ["notes/a.md"]
    finally:
        server.stop()
    assert reopen(ws.root) is not remote  # the service went away (a refused connection): decided again, here
    (ws.root / "metadata/service.json").unlink()
    back = open_memory(ws.root)
    assert not isinstance(back, RemoteMemory) and back.stat("notes/a.md")["path"] == "notes/a.md"
