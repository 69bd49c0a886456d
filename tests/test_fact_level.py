"""Validity per fact: a digest node that keeps what holds now and, under History, what it replaced. Search,
node_search and recall now, as of a day and with history; what a fact chunk's words are; doctor's fact checks.
Real files, the real Memory, a real DuckDB index."""

import datetime as dt

import pytest

from storage.index import doctor
from storage.memory import Memory
from storage.text import facts

NODE = "digest/people/ana.md"
OLD, NEW = "daily/2026-03-02/ana-porto.md", "daily/2026-09-14/ana-moves.md"
DIALOG = "session/dialog/s1.jsonl"


def node_text(extra_facts: str = "", history: str = "") -> str:
    return f"""# Ana

## Facts

- Ana lives in Lisbon, near the river. (about:: Ana) (since:: 2026-09-14) (source:: [[{NEW}#^f1]]) ^f2
- Ana works at a bakery. (about:: Ana) (since:: 2026-03-02) (source:: [[{OLD}#^f2]]) ^f3
{extra_facts}
## History

- Ana lives in Porto, near the bridge. (about:: Ana) (since:: 2026-03-02) (until:: 2026-09-14) (replaced_by:: [[{NODE}#^f2]]) (source:: [[{OLD}#^f1]]) ^f1
{history}
## Sources

- [[{OLD}]]
- [[{NEW}]]
"""


def write_ana(mem: Memory, **parts) -> None:
    mem.ws.write_text(DIALOG, '{"role": "user", "content": "Ana lives in Porto.", "created_at": "2026-03-02T10:00:00"}\n')
    mem.write(OLD, f"# Ana in Porto\n\n## Facts\n\n- Ana lives in Porto. (about:: Ana) (source:: [[{DIALOG}#L1]]) ^f1\n"
                   f"- Ana works at a bakery. (about:: Ana) (source:: [[{DIALOG}#L1]]) ^f2\n", name="Ana in Porto")
    mem.write(NEW, f"# Ana moves\n\n## Facts\n\n- Ana moved to Lisbon. (about:: Ana) (source:: [[{DIALOG}#L1]]) ^f1\n",
              name="Ana moves")
    mem.write(NODE, node_text(**parts), name="Ana", description="my sister")


@pytest.fixture
def mem(ws) -> Memory:
    m = Memory(ws.root)
    write_ana(m)
    return m


def line(mem: Memory, block: str) -> int:
    """The line fact `block` stands on in the node (the frontmatter `write` adds comes first)."""
    return facts.by_id(mem.ws.read_text(NODE))[block].line


def places(hits):
    return [(h["start_line"], h["status"], h["valid_from"], h["valid_to"]) for h in hits if h["path"] == NODE]


def test_search_now_as_of_and_with_history_at_fact_level(mem):
    lisbon, porto = line(mem, "f2"), line(mem, "f1")
    query = "Ana lives near the river bridge"
    now = mem.search(query, per_file=0, path_prefix="digest/")
    assert places(now)[0] == (lisbon, "current", "2026-09-14", None)  # Lisbon holds now; Porto is history
    assert all(line != porto for line, *_ in places(now))
    before = mem.search(query, per_file=0, path_prefix="digest/", as_of="2026-06-01")
    assert places(before)[0] == (porto, "superseded", "2026-03-02", "2026-09-14")  # the retired fact, held then
    assert all(line != lisbon for line, *_ in places(before))  # Lisbon did not hold yet
    both = mem.search(query, per_file=0, path_prefix="digest/", history=True)
    assert {lisbon, porto} <= {line for line, *_ in places(both)}
    on_the_day = mem.search(query, per_file=0, path_prefix="digest/", as_of="2026-09-14")  # until: exclusive
    assert [line for line, *_ in places(on_the_day) if line in (lisbon, porto)] == [lisbon]
    hit = next(h for h in before if h["start_line"] == porto)
    assert hit["text"].startswith("- Ana lives in Porto, near the bridge. (about:: Ana)")  # the line as written


def test_node_search_and_recall_follow_the_fact_windows(mem):
    # its only match is a retired fact: what holds now is found by its words (the Lisbon fact that replaced it)
    assert [n["path"] for n in mem.node_search("the bridge")] == [NODE]
    assert places(mem.search("the bridge", per_file=0))[0][:2] == (line(mem, "f2"), "current")
    assert [n["path"] for n in mem.node_search("the bridge", as_of="2026-06-01")] == [NODE]
    assert [n["path"] for n in mem.node_search("the bridge", history=True)] == [NODE]
    then = mem.recall("Ana Porto bridge", as_of="2026-06-01", path_prefix="digest/")
    porto = line(mem, "f1")
    assert then["items"][0]["start_line"] == porto and then["items"][0]["valid_to"] == "2026-09-14"
    assert f"[{NODE}:{porto}] superseded 2026-03-02..2026-09-14\n- Ana lives in Porto" in then["text"]
    now = mem.recall("Ana Porto bridge", path_prefix="digest/")
    assert "near the bridge" not in now["text"]


def test_a_fact_is_found_by_its_sentence_and_about_not_by_its_fields(mem):
    lines = {line(mem, block) for block in ("f1", "f2", "f3")}
    assert places(mem.search("Ana bakery", path_prefix="digest/"))[0][0] == line(mem, "f3")
    for noise in ("2026-03-02", "daily md", "replaced_by since", "s1 jsonl"):
        assert all(h["path"] != NODE or h["start_line"] not in lines
                   for h in mem.search(noise, per_file=0, history=True)), noise


def test_doctor_reports_each_broken_fact(ws):
    mem = Memory(ws.root)
    write_ana(mem, extra_facts=(
        "- Ana has a cat. (since:: 2026-05-01) (until:: 2026-04-01) ^f4\n"  # until before since (and ended)
        "- Ana plays the violin. (until:: 2026-10-01) ^f5\n"  # ended, but not under History
        f"- Ana likes tea. (replaced_by:: [[{NODE}#^f3]]) ^f6\n"  # current yet replaced
        "- Ana was born in May. ^f3\n"  # the block id of another fact
        "- Ana met Rui. (since:: last spring) ^f7\n"),
                   history=(
        "- Ana lived in Braga. (since:: 2025-01-01) ^f8\n"  # retired without until
        f"- Ana had a dog. (until:: 2026-01-01) (replaced_by:: [[{NODE}#^f99]]) ^f9\n"  # no such fact
        f"- Ana had a bike. (until:: 2026-01-01) (replaced_by:: [[digest/people/nobody.md#^f1]]) ^f10\n"
        f"- A loop. (until:: 2026-01-01) (replaced_by:: [[{NODE}#^f12]]) ^f11\n"
        f"- A loop back. (until:: 2026-01-01) (replaced_by:: [[{NODE}#^f11]]) ^f12\n"))
    mem.write("digest/people/rui.md", f"# Rui\n\n- Rui knows Ana. (source:: [[{OLD}#^f7]]) ^f1\n\n## Sources\n\n- [[{OLD}]]\n",
              name="Rui")
    with mem.db.session() as con:
        report = doctor.check(con, mem.ws, today=dt.date(2026, 12, 1))
    rows = {(r["path"], r["id"], r["problem"]) for r in report["facts"]}
    assert rows == {
        (NODE, "f4", "window"), (NODE, "f4", "ended"), (NODE, "f5", "ended"), (NODE, "f6", "replaced_current"),
        (NODE, "f3", "duplicate_id"), (NODE, "f7", "bad_date"), (NODE, "f8", "no_until"),
        (NODE, "f9", "successor_missing"), (NODE, "f10", "successor_missing"), (NODE, "f11", "cycle"),
        (NODE, "f12", "cycle")}
    assert sum(r["id"] == "f3" for r in report["facts"]) == 2  # both lines holding ^f3
    broken = {(r["source"], r["target"], r["anchor"]) for r in report["broken_anchors"]}
    assert broken == {("digest/people/rui.md", OLD, "^f7"), (NODE, NODE, "^f99")}  # block ids the target lacks
    assert report["ok"] is False and report["counts"]["facts"] == 12
    assert doctor.describe("facts", next(r for r in report["facts"] if r["id"] == "f8")) == (
        f"`{NODE}:{facts.by_id(mem.ws.read_text(NODE))['f8'].line}` ^f8: no_until: under History, but no until says when it stopped holding")


def test_a_sound_node_of_facts_has_no_findings(mem):
    with mem.db.session() as con:
        report = doctor.check(con, mem.ws, today=dt.date(2026, 12, 1))
    assert report["facts"] == [] and report["broken_anchors"] == [] and report["supersession"] == []
