"""Graph governance end to end: typed links, link mining, merge, split and archive as real Prefect flow runs
(test harness) against the scripted LLM server and a real workspace. Link sets are compared before/after."""

import json

import pytest
from click.testing import CliRunner

from dreamflow.cli import cli
from flows.governance import archive, doctor, link_mine, merge, split
from llm_server import Reply, json_reply, misbehave, text_of
from engine.models import usage_log
from storage.memory import Memory
from storage.text.markdown import parse_links, split_frontmatter

BAKE, BEN = "daily/2024-05-08/bake.md", "daily/2024-05-09/ben.md"


def sources(*lines: tuple[str, str]) -> str:
    return "\n## Sources\n\n" + "".join(f"- {what} ([[{path}]]).\n" for what, path in lines)


def text(mem: Memory, path: str) -> str:
    return mem.ws.read_text(path)


def link_set(mem: Memory) -> set[tuple[str, str]]:
    """(source, target) of every link written in a Markdown file outside raw material, read from the files."""
    return {(rel, link.target) for rel in mem.ws.iter_files() if rel.endswith(".md")
            and not rel.startswith(("resource/", "session/")) for link in parse_links(mem.ws.read_text(rel))}


def snapshot(mem: Memory) -> dict:
    return {rel: mem.ws.read_bytes(rel) for rel in mem.ws.iter_files()}


def read_artifact(key: str) -> str:
    from prefect import get_client

    with get_client(sync_client=True) as client:
        return next(a.data for a in client.read_latest_artifacts() if a.key == key)


@pytest.fixture
def mem(ws) -> Memory:
    m = Memory(ws.root)
    m.write(BAKE, "Fed the starter.\nIt doubled.\n", name="Baking")
    m.write(BEN, "Ben: feed every 12 hours.\n", name="Ben's advice")
    return m


# ---- typed links -----------------------------------------------------------------------------------------

def test_typed_links_on_edges_in_expansion_traverse_and_after_move(mem):
    mem.write("digest/wiki/alpha.md", "Alpha brews tea.\nuses:: [[digest/wiki/beta.md]]\n"
              "- part_of:: [[digest/wiki/epsilon.md#L1]]\nSee [[digest/wiki/delta.md]].\n", name="Alpha")
    mem.write("digest/wiki/beta.md", "Beta.\nuses:: [[digest/wiki/gamma.md]]\n", name="Beta")
    for name in ("gamma", "delta", "epsilon"):
        mem.write(f"digest/wiki/{name}.md", name.title(), name=name.title())

    out = mem.traverse(["digest/wiki/alpha.md"], direction="forward")
    assert {(e["target"], e["predicate"], e["anchor"]) for e in out["edges"]} == {
        ("digest/wiki/beta.md", "uses", None), ("digest/wiki/epsilon.md", "part_of", "L1"),
        ("digest/wiki/delta.md", None, None)}

    runner = CliRunner()
    walked = runner.invoke(cli, ["-w", str(mem.ws.root), "traverse", "digest/wiki/alpha.md", "--depth", "3",
                                 "--predicate", "uses", "--json"])
    assert walked.exit_code == 0, walked.output
    walked = json.loads(walked.output)
    assert sorted(n["path"] for n in walked["nodes"]) == ["digest/wiki/alpha.md", "digest/wiki/beta.md",
                                                          "digest/wiki/gamma.md"]
    assert {e["predicate"] for e in walked["edges"]} == {"uses"} and len(walked["edges"]) == 2

    hit = next(h for h in mem.search("alpha brews tea") if h["path"] == "digest/wiki/alpha.md")
    assert {(n["path"], n["predicate"], n["direction"]) for n in hit["neighbors"]} >= {
        ("digest/wiki/beta.md", "uses", "out"), ("digest/wiki/epsilon.md", "part_of", "out")}
    shown = runner.invoke(cli, ["-w", str(mem.ws.root), "search", "alpha brews tea"])
    assert "uses:: digest/wiki/beta.md" in shown.output and "part_of:: digest/wiki/epsilon.md#L1" in shown.output

    mem.move("digest/wiki/beta.md", "digest/wiki/tools/beta.md")
    back = mem.traverse(["digest/wiki/tools/beta.md"], direction="both")
    assert {(e["source"], e["target"], e["predicate"]) for e in back["edges"]} == {
        ("digest/wiki/alpha.md", "digest/wiki/tools/beta.md", "uses"),
        ("digest/wiki/tools/beta.md", "digest/wiki/gamma.md", "uses")}


def test_relink_follows_line_anchors_and_keeps_predicates(mem):
    mem.write("digest/wiki/old.md", "one\ntwo\nthree\n", name="Old")                   # body: lines 4-6
    mem.write("digest/wiki/new.md", "intro\nthree\nzero\none\ntwo\n", name="New")     # body: lines 4-8
    mem.write("notes/x.md", "[[digest/wiki/old.md#L4-L5|first two]] and cites:: [[digest/wiki/old.md#L6]]\n"
              "gone [[digest/wiki/old.md#L2]] plain [[digest/wiki/old.md]]\n")  # L2 is `name: Old`
    result = mem.relink("digest/wiki/old.md", "digest/wiki/new.md")
    assert result["rewritten"] == [{"path": "notes/x.md", "links": 4, "anchors_dropped": 1}]
    assert text(mem, "notes/x.md") == (
        "[[digest/wiki/new.md#L7-L8|first two]] and cites:: [[digest/wiki/new.md#L5]]\n"
        "gone [[digest/wiki/new.md]] plain [[digest/wiki/new.md]]\n")
    edges = mem.traverse(["digest/wiki/new.md"], direction="backward")["edges"]
    assert {e["predicate"] for e in edges} == {"cites", None}


# ---- link mining -----------------------------------------------------------------------------------------

def test_link_mine_weaves_accepted_links_and_never_drops_one(prefect_harness, llm, mem, ws):
    ana = "digest/personal/ana.md"
    mem.write(ana, "Ana bakes sourdough bread at her bakery in Lisbon.\nShe visits [[digest/wiki/portugal.md]] often.\n"
              + sources(("2024-05-08: she baked", BAKE)), name="Ana", description="Ana, a baker friend")
    mem.write("digest/wiki/lisbon.md", "Lisbon is the capital of Portugal.\n" + sources(("noted", BAKE)),
              name="Lisbon", description="The capital city")
    mem.write("digest/procedure/sourdough.md", "Sourdough bread needs a starter.\n" + sources(("noted", BEN)),
              name="Sourdough bread", description="Baking sourdough bread")
    mem.write("digest/wiki/portugal.md", "Portugal is in Europe.\n" + sources(("noted", BAKE)), name="Portugal")
    before = link_set(mem)
    llm.on(f'<node path="{ana}">', json_reply({"links": [
        {"target": "[[digest/wiki/lisbon.md]]", "old": "her bakery in Lisbon", "predicate": "located_in",
         "new": "her bakery in [[digest/wiki/lisbon.md|Lisbon]]", "reason": "where she lives"},
        {"target": "digest/procedure/sourdough.md", "reason": "she bakes it",  # `new` drops a link: listed instead
         "old": "She visits [[digest/wiki/portugal.md]] often", "new": "She visits [[digest/procedure/sourdough.md]]"},
        {"target": "digest/wiki/unknown.md", "reason": "not a candidate: ignored"},
    ]}))
    llm.responder = lambda body: json_reply({"links": []})

    summary = link_mine(max_nodes=10, workspace=str(ws.root))

    assert [o["item"] for o in summary["outcomes"]] == [
        ana, "digest/procedure/sourdough.md", "digest/wiki/lisbon.md", "digest/wiki/portugal.md"]
    assert summary["changed"] == [ana] and summary["failed"] == []
    offered = next(text_of(r) for r in llm.requests if f'<node path="{ana}">' in text_of(r))
    assert "- digest/wiki/lisbon.md: Lisbon" in offered and "- digest/wiki/portugal.md:" not in offered
    node = text(mem, ana)
    assert "her bakery in [[digest/wiki/lisbon.md|Lisbon]]." in node
    assert "She visits [[digest/wiki/portugal.md]] often." in node
    assert "## Related\n\n- [[digest/procedure/sourdough.md|Sourdough bread]]: she bakes it\n\n## Sources" in node
    assert "unknown.md" not in node
    after = link_set(mem)
    assert before <= after
    assert after - before == {(ana, "digest/wiki/lisbon.md"), (ana, "digest/procedure/sourdough.md")}
    assert split_frontmatter(node).meta["name"] == "Ana"

    calls = len(llm.requests)
    again = link_mine(max_nodes=10, workspace=str(ws.root))
    assert again["outcomes"] == [] and len(llm.requests) == calls  # nothing changed since the last run
    mem.append("digest/wiki/lisbon.md", "It has trams.")
    third = link_mine(max_nodes=10, workspace=str(ws.root))
    assert [o["item"] for o in third["outcomes"]] == ["digest/wiki/lisbon.md"]


# ---- merge -----------------------------------------------------------------------------------------------

@pytest.fixture
def duplicates(mem):
    """Two near-duplicate nodes; the survivor has more inbound links. Raw material links the victim too."""
    survivor, victim = "digest/wiki/sourdough.md", "digest/wiki/starter.md"
    mem.write(survivor, "Feed the starter twice a day.\nKeep it at [[digest/wiki/kitchen.md]] temperature.\n"
              + sources(("2024-05-08: fed it", BAKE)), name="Sourdough starter feeding",
              description="How often to feed the sourdough starter")
    mem.write(victim, "Every 12 hours.\nUse equal flour and water.\nuses:: [[digest/wiki/flour.md]]\n"
              + sources(("2024-05-09: Ben's advice", f"{BEN}#L1")), name="Feeding the sourdough starter",
              description="Feed the starter every 12 hours with equal flour and water", metadata={"tags": ["baking"]})
    for name in ("kitchen", "flour"):
        mem.write(f"digest/wiki/{name}.md", f"{name}.\n" + sources(("noted", BAKE)), name=name.title())
    for name in ("bread", "pizza"):
        mem.write(f"digest/wiki/{name}.md", f"{name} uses a [[{survivor}]].\n" + sources(("noted", BAKE)), name=name)
    mem.write("digest/personal/ben.md", f"Ben taught me [[{victim}#L6|feeding]] and the [[{victim}#L7|ratio]].\n"
              f"depends_on:: [[{victim}]]\n" + sources(("met", BEN)), name="Ben")
    mem.ws.write_text("resource/notes.md", f"raw mention [[{victim}]]\n")
    mem.reconcile()
    return survivor, victim


def test_merge_folds_the_doctors_duplicate_keeping_every_source_and_link(prefect_harness, llm, mem, ws, duplicates):
    survivor, victim = duplicates
    assert "Every 12 hours." == text(mem, victim).splitlines()[5]  # what #L6 points at
    before = link_set(mem)
    llm.on("Fold the second node", json_reply({
        "name": "Feeding the sourdough starter", "description": "When and how to feed the starter",
        "content": "Feed the starter twice a day, that is:\nEvery 12 hours.\n"
                   "Keep it at [[digest/wiki/kitchen.md]] temperature.\n" + sources(("2024-05-08: fed it", BAKE))}))

    summary = merge(workspace=str(ws.root))  # pairs from the doctor

    assert [o["item"] for o in summary["outcomes"]] == [f"{victim} → {survivor}"]
    assert summary["deleted"] == [victim] and not mem.ws.resolve(victim).exists()
    assert summary["usage"]["kinds"]["merge"]["first_try"] == 1
    assert "| merge | 1 | 1/1 |" in read_artifact("merge")
    assert usage_log.recent(str(ws.root))[0]["job"] == "merge"
    assert summary["changed"] == ["digest/personal/ben.md", survivor]
    node = text(mem, survivor)
    meta = split_frontmatter(node).meta
    assert meta["merged_from"] == [victim] and meta["tags"] == ["baking"]
    assert meta["name"] == "Feeding the sourdough starter"
    assert "- uses:: [[digest/wiki/flour.md]]" in node  # dropped by the model, restored with its predicate
    assert f"- 2024-05-09: Ben's advice ([[{BEN}#L1]])." in node  # source restored
    line = node.splitlines().index("Every 12 hours.") + 1
    assert text(mem, "digest/personal/ben.md").startswith(
        f"---\nname: Ben\n---\nBen taught me [[{survivor}#L{line}|feeding]] and the [[{survivor}|ratio]].\n"
        f"depends_on:: [[{survivor}]]\n")
    assert text(mem, "resource/notes.md") == f"raw mention [[{victim}]]\n"  # raw material is never rewritten
    moved = {(survivor if s == victim else s, survivor if t == victim else t) for s, t in before}
    assert moved <= link_set(mem)
    report = mem.doctor()
    assert report["broken_links"] == [] and report["near_duplicates"] == []


def test_a_failed_merge_changes_nothing(prefect_harness, llm, mem, ws, duplicates):
    survivor, victim = duplicates
    before = snapshot(mem)
    llm.on("Fold the second node", Reply(status=500, content="model down"))
    state = merge(pairs=[[survivor, victim]], workspace=str(ws.root), return_state=True)
    assert state.is_failed()
    summary = state.result(raise_on_failure=False).summary
    assert summary["failed"][0]["item"] == f"{victim} → {survivor}"
    # the failed call is counted: it cost time (a timeout costs minutes on a local model)
    assert summary["usage"]["calls"] == 1 and summary["usage"]["kinds"]["merge"]["failures"] == 1
    assert snapshot(mem) == before


# ---- split -----------------------------------------------------------------------------------------------

def test_split_carries_sources_and_links_into_linked_parts(prefect_harness, llm, mem, ws):
    japan, kyoto, tokyo = "digest/wiki/japan.md", "daily/2024-04-01/kyoto.md", "daily/2024-04-03/tokyo.md"
    mem.write(kyoto, "Temples.\n", name="Kyoto")
    mem.write(tokyo, "Ramen.\n", name="Tokyo")
    mem.write(japan, "# Japan\n\nKyoto temples: we saw [[digest/wiki/kinkakuji.md]].\n\n"
              "Tokyo food: ramen at [[digest/wiki/ichiran.md]].\n"
              + sources(("2024-04-01: Kyoto day", kyoto), ("2024-04-03: Tokyo day", tokyo)), name="Japan trip")
    for name in ("kinkakuji", "ichiran"):
        mem.write(f"digest/wiki/{name}.md", name, name=name)
    assert text(mem, japan).splitlines()[5].startswith("Kyoto temples")
    mem.write("digest/personal/me.md", f"I loved [[{japan}#L6|the temples]] on [[{japan}]].\n", name="Me")
    before = link_set(mem)
    original = text(mem, japan)
    llm.on("Break it into focused nodes", json_reply({"overview": "Our April 2024 trip to Japan.", "parts": [
        {"name": "Kyoto temples", "description": "Temples we saw", "content": "We saw [[digest/wiki/kinkakuji.md]].",
         "sources": [f"[[{kyoto}]]"]},
        {"name": "Tokyo food", "description": "What we ate", "content": "Ramen in Tokyo.", "sources": []}]}))

    summary = split(paths=[japan], workspace=str(ws.root))

    parts = ["digest/wiki/kyoto-temples.md", "digest/wiki/tokyo-food.md"]
    assert summary["changed"] == sorted(["digest/personal/me.md", japan, *parts]) and summary["deleted"] == []
    hub = text(mem, japan)
    assert "Our April 2024 trip to Japan." in hub and split_frontmatter(hub).meta["split_into"] == parts
    assert f"- [[{parts[0]}|Kyoto temples]]: Temples we saw" in hub
    assert "- [[digest/wiki/ichiran.md]]" in hub  # no part kept it: the hub lists it
    for part, other in (parts, parts[::-1]):
        body = text(mem, part)
        assert split_frontmatter(body).meta["split_from"] == japan
        assert f"[[{japan}]]" in body and f"[[{other}|" in body
    assert f"[[{kyoto}]]" in text(mem, parts[0]) and f"[[{tokyo}]]" not in text(mem, parts[0])
    assert f"[[{kyoto}]]" in text(mem, parts[1]) and f"[[{tokyo}]]" in text(mem, parts[1])  # named none: all
    after = link_set(mem)
    assert {t for s, t in before if s == japan} <= {t for s, t in after if s in (japan, *parts)}
    assert {(s, t) for s, t in before if s != japan} <= after
    assert text(mem, "digest/personal/me.md").startswith(f"---\nname: Me\n---\nI loved [[{japan}|the temples]]")
    assert original != hub


# ---- archive and doctor flows ----------------------------------------------------------------------------

def test_archive_moves_stale_and_given_nodes_and_keeps_them_searchable(prefect_harness, mem, ws):
    mem.write("digest/wiki/fax.md", "Fax machine settings for the office.\n" + sources(("noted", BAKE)),
              name="Fax", metadata={"updated": "2020-01-01"})
    mem.write("digest/wiki/phone.md", "Phone plan details.\n" + sources(("noted", BAKE)), name="Phone")
    mem.write("digest/personal/me.md", "My [[digest/wiki/phone.md|phone]].\n" + sources(("noted", BAKE)), name="Me")

    summary = archive(workspace=str(ws.root))  # the doctor's stale nodes
    assert [o["item"] for o in summary["outcomes"]] == ["digest/wiki/fax.md"]
    assert summary["deleted"] == ["digest/wiki/fax.md"] and summary["changed"] == ["digest/archive/wiki/fax.md"]

    result = CliRunner().invoke(cli, ["-w", str(ws.root), "archive", "digest/wiki/phone.md", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["changed"] == ["digest/archive/wiki/phone.md", "digest/personal/me.md"]
    assert "My [[digest/archive/wiki/phone.md|phone]]." in text(mem, "digest/personal/me.md")

    fax = "digest/archive/wiki/fax.md"
    assert split_frontmatter(text(mem, fax)).meta["archived"] and mem.read(fax)["total_lines"] > 0
    assert all(h["path"] != fax for h in mem.search("fax machine settings"))
    assert mem.search("fax machine settings", include_archived=True)[0]["path"] == fax
    assert mem.search("fax machine settings", path_prefix="digest/archive/")[0]["path"] == fax
    assert mem.node_search("fax machine") == []
    report = mem.doctor()
    assert report["ok"] and report["stale"] == [], {k: report[k] for k in report["counts"] if report[k]}


def test_doctor_flow_publishes_a_markdown_artifact(prefect_harness, mem, ws):
    mem.write("digest/wiki/lonely.md", "Alone.", name="Lonely", metadata={"about": "lonely"})  # the dream's node
    report = doctor(workspace=str(ws.root))
    assert report["ok"] is False and [o["path"] for o in report["orphans"]] == ["digest/wiki/lonely.md"]
    artifact = read_artifact("doctor")
    assert "# Memory graph: needs attention" in artifact and "`digest/wiki/lonely.md`" in artifact


def test_relink_of_many_files_reindexes_them_in_one_go(mem):
    mem.write("digest/wiki/hub.md", "Hub.", name="Hub")
    for i in range(12):
        mem.write(f"notes/n{i}.md", f"uses:: [[digest/wiki/hub.md]] ({i})\n")
    result = mem.relink("digest/wiki/hub.md", "digest/wiki/center.md")
    assert len(result["rewritten"]) == 12
    edges = mem.traverse(["digest/wiki/center.md"], direction="backward")["edges"]
    assert sorted(e["source"] for e in edges) == sorted(f"notes/n{i}.md" for i in range(12))
    assert {e["predicate"] for e in edges} == {"uses"}
    assert mem.traverse(["digest/wiki/hub.md"], direction="backward")["edges"] == []


def test_merge_and_doctor_run_through_the_service_api(prefect_harness, llm, mem, ws, duplicates):
    """With a service announced in metadata/service.json, the tasks reach memory over HTTP (RemoteMemory)."""
    import os

    from test_api import ApiServer

    class Served(Memory):
        calls: list[str] = []

        def relink(self, *args, **kwargs):
            self.calls.append("relink")
            return super().relink(*args, **kwargs)

        def doctor(self, *args, **kwargs):
            self.calls.append("doctor")
            return super().doctor(*args, **kwargs)

    survivor, victim = duplicates
    server = ApiServer(Served(ws.root))
    try:
        ws.write_text("metadata/service.json", json.dumps({"url": server.url, "pid": os.getpid(),
                                                            "token_required": False}))
        llm.on("Fold the second node", json_reply({"content": "Every 12 hours.\n"}))
        summary = merge(pairs=[[survivor, victim]], workspace=str(ws.root))
        assert summary["deleted"] == [victim] and summary["changed"] == ["digest/personal/ben.md", survivor]
        assert f"[[{survivor}#L" in text(mem, "digest/personal/ben.md")
        report = doctor(workspace=str(ws.root))
        assert report["broken_links"] == [] and report["near_duplicates"] == []
        assert Served.calls == ["relink", "doctor"]  # the tasks went through the service
    finally:
        server.stop()
        os.remove(ws.resolve("metadata/service.json"))


# ---- quality gates: what a small model copies is never written ------------------------------------------------

@pytest.mark.parametrize("copied", [None, "merged"])
def test_merge_never_writes_the_repair_turns_example(prefect_harness, llm, mem, ws, duplicates, copied):
    survivor, victim = duplicates
    before = snapshot(mem)
    misbehave(llm, "Fold the second node", copied)
    state = merge(pairs=[[survivor, victim]], workspace=str(ws.root), return_state=True)
    assert state.is_failed()
    summary = state.result(raise_on_failure=False).summary
    assert summary["failed"][0]["item"] == f"{victim} → {survivor}" and sum(summary["usage"]["gates"].values())
    assert snapshot(mem) == before


def test_split_never_writes_the_repair_turns_example(prefect_harness, llm, mem, ws):
    japan, kyoto = "digest/wiki/japan.md", "daily/2024-04-01/kyoto.md"
    mem.write(kyoto, "Temples.\n", name="Kyoto")
    mem.write(japan, "# Japan\n\nKyoto temples and Tokyo ramen.\n" + sources(("2024-04-01: Kyoto day", kyoto)),
              name="Japan trip")
    before = snapshot(mem)
    misbehave(llm, "Break it into focused nodes")  # the shape copied: one placeholder part, not a plan
    state = split(paths=[japan], workspace=str(ws.root), return_state=True)
    assert state.is_failed() and snapshot(mem) == before

    llm.reset()  # the prompt's wrapper pasted as a part (the 1.5B model's node body), twice
    wrapped = {"overview": "Kyoto and Tokyo.", "parts": [
        {"name": "Kyoto temples", "content": f'<node path="{japan}">\nKyoto temples.\n</node>', "sources": []},
        {"name": "Tokyo ramen", "content": "Tokyo ramen.", "sources": []}]}
    llm.on("Break it into focused nodes", json_reply(wrapped), json_reply(wrapped))
    state = split(paths=[japan], workspace=str(ws.root), return_state=True)
    assert state.is_failed()
    summary = state.result(raise_on_failure=False).summary
    assert "rule `markup`" in summary["failed"][0]["error"] and summary["usage"]["gates"] == {"markup": 2}
    assert snapshot(mem) == before


def test_merge_and_split_leave_a_node_of_facts_to_the_dream(prefect_harness, llm, mem, ws):
    """A prose rewrite would lose each fact's validity and history: both skip without asking the model."""
    from storage.text import facts
    nodes = []
    for name, text in [("user", "The user lives in Porto."), ("the-user", "The user drives a Tesla.")]:
        body = facts.add(f"# {name}\n", facts.Fact(text, id="f1", since="2026-11-02",
                                                    sources=("daily/2026-11-02/home.md#^f1",)))
        nodes.append(f"digest/personal/{name}.md")
        mem.write(nodes[-1], body, name=name)
    before = snapshot(mem)
    outcomes = [*merge(pairs=[nodes], workspace=str(ws.root))["outcomes"],
                *split(paths=[nodes[0]], workspace=str(ws.root))["outcomes"]]
    assert [(o["status"], o["detail"][:16]) for o in outcomes] == [("skipped", "a node of facts:")] * 2
    assert snapshot(mem) == before and [r for r in llm.requests if "messages" in r] == []
