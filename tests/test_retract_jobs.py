"""A retracted fact stays retracted: neither a dream re-run nor an auto-memory re-run over the same conversation
(its checkpoint lost, the card filed under another day) learns it again (real flow runs, the scripted LLM)."""

import os

import pytest

from flows.auto_dream import auto_dream
from flows.auto_memory import auto_memory
from llm_server import answer_by_message, fact
from storage.memory import Memory
from storage.text import facts

DAY, NEXT = "2026-11-05", "2026-11-06"
STORY = [{"role": "user", "content": "Big news: I moved to Porto last week.", "created_at": f"{DAY}T18:00:00"},
         {"role": "assistant", "content": "Congratulations!", "created_at": f"{DAY}T18:01:00"},
         {"role": "user", "content": "I prefer green tea over coffee these days.", "created_at": f"{DAY}T18:02:00"}]


@pytest.fixture
def memory(ws, monkeypatch) -> Memory:
    monkeypatch.setenv("DREAMFLOW_EMBEDDER", "none")
    return Memory(ws.root)


def script(llm) -> None:
    llm.reset()
    answer_by_message(llm, "Moving and tea", ("moved to Porto", fact("The user lives in Porto.")),
                      ("green tea", fact("The user prefers green tea over coffee.", kind="preference")))


def all_facts(memory: Memory, prefix: str) -> list[facts.Fact]:
    return [f for e in memory.list(prefix)["entries"] if e["path"].endswith(".md")
            for f in facts.parse(memory.ws.read_text(e["path"]))]


def test_neither_a_dream_nor_an_auto_memory_rerun_learns_a_retracted_fact_again(prefect_harness, llm, memory, ws):
    script(llm)
    first = auto_memory(session_id="s1", workspace=str(ws.root), messages=STORY)
    auto_dream(date=DAY, scan_days=1, workspace=str(ws.root))
    node = "digest/personal/user.md"
    wrong = next(f for f in facts.parse(memory.ws.read_text(node)) if "Porto" in f.text)
    out = memory.retract(node, wrong.id, reason="I live in Braga")
    assert out["cards"] and out["lines"] == ["session/dialog/s1.jsonl#L1"]

    # auto-memory again over the same conversation: checkpoint lost, filed under the next day
    os.remove(ws.root / "metadata/checkpoints/sessions/s1.json")
    script(llm)
    again = auto_memory(session_id="s1", workspace=str(ws.root), date=NEXT)
    assert again["card"] != first["card"] and again["card"].startswith(f"daily/{NEXT}/")
    learned = [f.text for f in facts.parse(memory.ws.read_text(again["card"]))]
    assert learned == ["The user prefers green tea over coffee."]

    # the dream again, its node gone (a person deleted it) and its checkpoint lost
    memory.delete(node)
    os.remove(ws.root / "metadata/checkpoints/dream.json")
    auto_dream(date=NEXT, scan_days=2, workspace=str(ws.root))
    texts = [f.text for f in all_facts(memory, "digest/")]
    assert "The user prefers green tea over coffee." in texts
    assert not [t for t in texts if "Porto" in t]
