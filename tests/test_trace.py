"""`trace`: from a fact of a node, through the card facts it was consolidated from, down to the dialog records
and resource lines they cite, on every surface; a broken chain is reported, never raised. Real files, the real
Memory, the CLI and MCP servers as processes, the HTTP API on 127.0.0.1."""

import json
import subprocess

import anyio
import pytest

from storage.errors import InvalidInput, NotFound, PathError
from storage.memory import Memory
from storage.text import facts

DIALOG = "session/dialog/s1.jsonl"
CARD = "daily/2026-09-14/ana-moves.md"
RESOURCE_CARD = "daily/2026-09-15/lease.md"
LEASE = "resource/2026-09-15/lease.md"
NODE = "digest/people/ana.md"
RECORDS = [
    {"role": "user", "content": "Big news: Ana moved to Lisbon last week.", "created_at": "2026-09-14T18:02:00+00:00",
     "id": "m1"},
    {"role": "assistant", "content": "Lisbon! Where does she live there?", "created_at": "2026-09-14T18:02:04+00:00",
     "id": "m2"},
    {"role": "user", "content": "Near the river, in Alfama.", "created_at": "2026-09-14T18:03:10+00:00", "id": "m3"},
]


@pytest.fixture
def mem(ws) -> Memory:
    m = Memory(ws.root)
    ws.write_text(DIALOG, "".join(json.dumps(r) + "\n" for r in RECORDS))
    ws.write_text(LEASE, "# Lease\n\nTenant: Ana.\nAddress: Rua da Judiaria 5, Alfama, Lisbon.\nRent: 900 EUR.\n")
    m.write(CARD, f"""# Ana moves to Lisbon

## Facts

- Ana lives in Lisbon, in Alfama. (about:: Ana) (date:: 2026-09-07) (source:: [[{DIALOG}#L1|2026-09-14 18:02]], [[{DIALOG}#L3|2026-09-14 18:03]]) ^f1
""", name="Ana moves to Lisbon")
    m.write(RESOURCE_CARD, f"# Ana's lease\n\n## Facts\n\n- Ana rents a flat in Alfama for 900 EUR. (about:: Ana) "
                           f"(source:: [[{LEASE}#L3-L5]]) ^f1\n", name="Ana's lease")
    m.write(NODE, f"""# Ana

## Facts

- Ana lives in Lisbon, in Alfama. (about:: Ana) (since:: 2026-09-07) (source:: [[{CARD}#^f1]], [[{RESOURCE_CARD}#^f1]]) ^f2

## History

- Ana lives in Porto. (about:: Ana) (since:: 2026-03-02) (until:: 2026-09-07) (replaced_by:: [[{NODE}#^f2]]) (source:: [[daily/2026-03-02/gone.md#^f1]], [[{CARD}#^f9]]) ^f1

## Sources

- [[{CARD}]]
""", name="Ana", description="my sister")
    return m


def test_a_node_fact_traces_through_its_card_fact_to_the_messages_and_resource_lines(mem):
    answer = mem.trace(NODE, "f2")
    chain = answer["chain"]
    assert (chain["type"], chain["path"], chain["anchor"], chain["text"]) == ("fact", NODE, "^f2",
                                                                             "Ana lives in Lisbon, in Alfama.")
    assert (chain["since"], chain["until"], chain["status"]) == ("2026-09-07", None, "current")
    card, lease = chain["sources"]
    assert (card["path"], card["anchor"], card["date"], card["status"]) == (CARD, "^f1", "2026-09-07", None)
    assert [(r["type"], r["line"], r["role"], r["created_at"], r["text"]) for r in card["sources"]] == [
        ("record", 1, "user", "2026-09-14T18:02:00+00:00", "Big news: Ana moved to Lisbon last week."),
        ("record", 3, "user", "2026-09-14T18:03:10+00:00", "Near the river, in Alfama.")]
    assert card["sources"][0]["path"] == DIALOG and card["sources"][0]["id"] == "m1"
    assert [(s["type"], s["path"], s["start_line"], s["end_line"], s["text"]) for s in lease["sources"]] == [
        ("lines", LEASE, 3, 5, "Tenant: Ana.\nAddress: Rua da Judiaria 5, Alfama, Lisbon.\nRent: 900 EUR.")]
    assert answer["problems"] == [] and answer["truncated"] is False and answer["steps"] == 6
    assert mem.trace(f"{NODE}#^f2") == answer == mem.trace(NODE, f"{NODE}#^f2") == mem.trace("digest/people/ana", "^f2")
    by_line = mem.trace(NODE, str(chain["line"]))
    assert by_line["chain"] == chain and by_line["anchor"] == f"L{chain['line']}"


def test_a_broken_chain_is_reported_not_raised(mem):
    answer = mem.trace(NODE, "f1")
    assert answer["chain"]["status"] == "superseded" and answer["chain"]["replaced_by"] == f"{NODE}#^f2"
    gone, missing = answer["chain"]["sources"]
    assert (gone["type"], gone["path"]) == ("broken", "daily/2026-03-02/gone.md")
    assert "no such file" in gone["problem"]
    assert (missing["type"], missing["anchor"], missing["problem"]) == ("broken", "^f9", f"{CARD} has no block ^f9")
    assert [p["path"] for p in answer["problems"]] == ["daily/2026-03-02/gone.md", CARD]


def test_cycles_outside_paths_and_prose_lines(mem, ws):
    mem.write("digest/wiki/a.md", "# A\n\n- A holds. (source:: [[digest/wiki/b.md#^f1]]) ^f1\n")
    mem.write("digest/wiki/b.md", "# B\n\n- B holds. (source:: [[digest/wiki/a.md#^f1]], [[metadata/index.duckdb#L1]]) ^f1\n")
    looped = mem.trace("digest/wiki/a.md", "f1")
    b = looped["chain"]["sources"][0]
    assert [s["type"] for s in b["sources"]] == ["broken", "broken"]
    assert "cycle" in b["sources"][0]["problem"] and "metadata/" in b["sources"][1]["problem"]
    # an older prose node: a line is traced through the links written on it
    at = facts.by_id(ws.read_text(CARD))["f1"].line
    mem.write("digest/wiki/old.md", f"# Old\n\nAna moved to Lisbon ([[{CARD}#L{at}]], [[{DIALOG}#L2]]).\n")
    prose = mem.trace("digest/wiki/old.md", "L3")["chain"]
    assert prose["type"] == "line" and prose["text"].startswith("Ana moved to Lisbon")
    card, record = prose["sources"]
    assert (card["type"], card["anchor"]) == ("fact", "^f1") and len(card["sources"]) == 2
    assert (record["role"], record["created_at"]) == ("assistant", "2026-09-14T18:02:04+00:00")


def test_what_cannot_be_traced_is_a_clear_error(mem):
    with pytest.raises(NotFound, match="no such file"):
        mem.trace("digest/people/nobody.md", "f1")
    with pytest.raises(NotFound, match=r"has no fact \^f7 \(its facts: \^f2, \^f1"):
        mem.trace(NODE, "f7")
    with pytest.raises(NotFound, match="has no line 400"):
        mem.trace(NODE, "400")
    with pytest.raises(NotFound, match="is blank"):
        mem.trace(NODE, str(facts.by_id(mem.ws.read_text(NODE))["f2"].line - 1))
    with pytest.raises(PathError):
        mem.trace("metadata/index.duckdb", "f1")
    with pytest.raises(PathError):
        mem.trace("../outside.md", "f1")
    with pytest.raises(InvalidInput):
        mem.trace(NODE)
    with pytest.raises(InvalidInput):
        mem.trace(NODE, "f2!")
    with pytest.raises(InvalidInput):
        mem.trace(NODE, f"{CARD}#^f1")


@pytest.mark.e2e
def test_trace_on_the_cli_http_and_mcp(mem, ws):
    from test_api import ApiServer
    from test_mcp import DREAMFLOW, call, stdio

    from engine.access.client import RemoteMemory

    proc = subprocess.run([DREAMFLOW, "--workspace", str(ws.root), "trace", NODE, "f2"], capture_output=True,
                          text=True, timeout=60, input="")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"{NODE}#^f2 (fact, current since 2026-09-07): Ana lives in Lisbon, in Alfama."
    assert lines[1] == f"  └ {CARD}#^f1 (fact, 2026-09-07): Ana lives in Lisbon, in Alfama."
    assert lines[2] == (f"    └ {DIALOG}#L1 2026-09-14T18:02:00+00:00 user: Big news: Ana moved to Lisbon last "
                        "week.")
    assert lines[5] == f"    └ {LEASE}#L3-L5: Tenant: Ana."
    missing = subprocess.run([DREAMFLOW, "--workspace", str(ws.root), "trace", NODE, "f7", "--json"],
                             capture_output=True, text=True, timeout=60, input="")
    assert missing.returncode == 3 and json.loads(missing.stdout)["error"]["type"] == "NotFound"

    server = ApiServer(mem)
    try:
        assert RemoteMemory(server.url).trace(NODE, "f2") == mem.trace(NODE, "f2")
    finally:
        server.stop()

    async def session():
        async with stdio(ws.root) as client:
            return await call(client, "trace", path=NODE, fact="f1")

    result = anyio.run(session)
    text = result.content[0].text
    assert text.startswith(f"{NODE}#^f1 (fact, superseded 2026-03-02..2026-09-07): Ana lives in Porto.")
    assert "BROKEN" in text and "[2 link(s) lead nowhere" in text
    assert result.structured_content["chain"]["anchor"] == "^f1"


def test_a_long_chain_stops_at_its_bounds(ws):
    from storage.search import trace

    mem = Memory(ws.root)
    for i in range(trace.MAX_DEPTH + 3):  # each node fact cites the next node's fact
        mem.write(f"digest/chain/n{i}.md", f"# N{i}\n\n- Step {i}. (source:: [[digest/chain/n{i + 1}.md#^f1]]) ^f1\n")
    answer = mem.trace("digest/chain/n0.md", "f1")
    depth, step = 0, answer["chain"]
    while step.get("sources"):
        depth, step = depth + 1, step["sources"][0]
    assert depth == trace.MAX_DEPTH and answer["truncated"] is True and answer["problems"] == []
