"""The graph health report: every finding on a crafted workspace, none on a clean one, and --fix (idempotent,
writes nothing beyond its repairs). Real files, a real DuckDB index; no LLM."""

import datetime as dt
import json
import os

import pytest
from click.testing import CliRunner

from dreamflow.cli import cli
from storage.index import doctor
from storage.memory import Memory

DAY = "2024-05-08"
TODAY = dt.date(2024, 6, 1)
CARD = f"daily/{DAY}/tea.md"


def node(mem: Memory, path: str, body: str, name: str, description: str = "", **meta) -> None:
    mem.write(path, body, name=name, description=description, metadata=meta or None)


def sources(*targets: str) -> str:
    return "\n## Sources\n\n" + "".join(f"- {DAY}: noted ([[{t}]]).\n" for t in targets)


@pytest.fixture
def mem(tmp_path) -> Memory:
    """A clean graph: two digest nodes linking each other, each citing a daily card."""
    m = Memory(tmp_path / "ws")
    m.write(CARD, "Green tea at 80 degrees.\nSteep two minutes.\nNo sugar.\n", name="Tea", description="Tea notes")
    node(m, "digest/wiki/tea.md", "Brew green tea at 80 °C; heat water in the [[digest/wiki/kettle.md|kettle]].\n"
         + sources(f"{CARD}#L5-L6"), "Green tea", "How to brew green tea")
    node(m, "digest/wiki/kettle.md", "The kettle boils water for [[digest/wiki/tea.md]].\n" + sources(CARD),
         "Kettle", "The electric kettle")
    return m


def check(mem: Memory, **kwargs) -> dict:
    with mem.db.session() as con:
        return doctor.check(con, mem.ws, today=TODAY, **kwargs)


def snapshot(mem: Memory) -> dict:
    return {rel: mem.ws.read_bytes(rel) for rel in mem.ws.iter_files()}


def test_a_clean_graph_has_no_findings(mem):
    report = check(mem)
    assert report["ok"] is True
    assert report["counts"] == {key: 0 for key in doctor.PROBLEMS + doctor.NOTES}
    assert report["digest_nodes"] == 2 and report["files"] == 3 and report["links"] == 4


def test_heading_and_block_anchors_must_name_a_heading_or_block_of_their_target(mem):
    mem.write("digest/wiki/brewing.md", "# Setup\n\nFill the kettle. ^block-1\n\n## Water temperature!\n\n80 °C.\n\n"
              "```\n# Cleanup\n```\n", name="Brewing", description="Brewing steps")
    links = ["Setup", "setup", "water-temperature", "Water  temperature!", "Setup#Water temperature!", "^block-1",
             "Cleanup", "Setup#Storage", "^block-2"]
    node(mem, "digest/wiki/links.md", "".join(f"- [[digest/wiki/brewing.md#{a}]]\n" for a in links) + sources(CARD),
         "Links", "Links into brewing")
    report = check(mem)
    assert sorted(r["anchor"] for r in report["broken_anchors"]) == [  # Cleanup: in code; ^block-2: no such block
        "Cleanup", "Setup#Storage", "^block-2"]
    assert all(r["source"] == "digest/wiki/links.md" for r in report["broken_anchors"])


def test_every_finding_on_a_crafted_workspace(mem):
    ws = mem.ws
    node(mem, "digest/wiki/broken.md", "See [[digest/wiki/nowhere.md]] and [[digest/wiki/tea.md]].\n" + sources(CARD),
         "Broken", "Links to a missing node")
    node(mem, "digest/wiki/anchor.md", "About [[digest/wiki/tea.md]].\n" + sources(f"{CARD}#L2-L40"),
         "Anchor", "Cites past the end")
    node(mem, "digest/wiki/lonely.md", "Nothing links here and it links nowhere.\n", "Lonely", "An island",
         about="lonely")  # the jobs' writing (the dream's `about`): it must link and cite
    node(mem, "digest/wiki/gone.md", "On [[digest/wiki/tea.md]].\n" + sources("daily/2024-01-01/deleted.md"),
         "Gone", "Its only source was deleted", about="gone")
    node(mem, "digest/wiki/uncited.md", "On [[digest/wiki/kettle.md]].\n\n## Sources\n\nto do\n", "Uncited",
         "A Sources section without links", merged_from=["digest/wiki/uncited-2.md"])
    node(mem, "digest/procedure/sourdough-a.md", "Feed it twice a day; see [[digest/wiki/tea.md]].\n" + sources(CARD),
         "Sourdough starter feeding", "How often to feed the sourdough starter")
    node(mem, "digest/procedure/sourdough-b.md", "Every 12 hours.\n" + sources(CARD),
         "Feeding the sourdough starter", "Feed the starter every 12 hours with equal flour and water")
    node(mem, "digest/wiki/old.md", "Old note on [[digest/wiki/kettle.md]].\n" + sources(CARD), "Old", "Stale",
         updated="2020-01-01")
    node(mem, "digest/wiki/long.md", "Links [[digest/wiki/tea.md]].\n" + "".join(f"line {i}\n" for i in range(60))
         + sources(CARD), "Long", "A long node")
    ws.write_text(f"daily/{DAY}/bad.md", "---\nname: [oops\n---\nBody\n")  # outside the tools
    mem.reconcile()
    # behind the index's back: a new file, an edit, a deletion and a move
    ws.write_text("daily/2024-05-09/new.md", "New card\n")
    ws.write_text(CARD, ws.read_text(CARD) + "Add honey.\n")
    os.makedirs(ws.resolve("digest/wiki/tools"))
    os.rename(ws.resolve("digest/wiki/kettle.md"), ws.resolve("digest/wiki/tools/kettle.md"))

    report = check(mem, overlong_lines=40)

    def rows(key, *fields):
        return sorted(tuple(r[f] for f in fields) for r in report[key])

    assert report["ok"] is False
    assert rows("broken_links", "source", "target") == [
        ("digest/wiki/broken.md", "digest/wiki/nowhere.md"),
        ("digest/wiki/gone.md", "daily/2024-01-01/deleted.md"),
        ("digest/wiki/old.md", "digest/wiki/kettle.md"),
        ("digest/wiki/tea.md", "digest/wiki/kettle.md"),
        ("digest/wiki/uncited.md", "digest/wiki/kettle.md"),
    ]
    assert rows("broken_anchors", "source", "anchor", "target_lines") == [("digest/wiki/anchor.md", "L2-L40", 7)]
    assert rows("orphans", "path") == [("digest/wiki/lonely.md",)]
    assert rows("missing_sources", "path", "reason") == [
        ("digest/wiki/gone.md", "all 1 sources are missing"),
        ("digest/wiki/lonely.md", "no ## Sources section"),
        ("digest/wiki/uncited.md", "## Sources cites nothing"),
    ]
    assert [d["paths"] for d in report["near_duplicates"]] == [
        ["digest/procedure/sourdough-a.md", "digest/procedure/sourdough-b.md"]]
    assert rows("bad_frontmatter", "path") == [(f"daily/{DAY}/bad.md",)]
    assert rows("drift", "path", "state") == [
        (CARD, "modified"),
        ("daily/2024-05-09/new.md", "added"),
        ("digest/wiki/kettle.md", "deleted"),
        ("digest/wiki/tools/kettle.md", "added"),
    ]
    assert report["moved"] == [{"from": "digest/wiki/kettle.md", "to": "digest/wiki/tools/kettle.md"}]
    assert rows("stale", "path", "updated") == [("digest/wiki/old.md", "2020-01-01")]
    assert rows("overlong", "path") == [("digest/wiki/long.md",)]
    assert report["counts"]["broken_links"] == 5 and report["counts"]["drift"] == 4


def test_fix_reindexes_and_retargets_moves_then_is_idempotent(mem):
    ws = mem.ws
    check(mem)  # an earlier run remembers the link targets' content hashes
    mem.write("digest/wiki/pot.md", "A teapot for [[digest/wiki/tea.md#L1|brewing]].\n"
              "uses:: [[digest/wiki/kettle.md#L1]]\n"
              + sources(CARD), name="Pot")
    os.makedirs(ws.resolve("digest/wiki/tools"))
    os.rename(ws.resolve("digest/wiki/kettle.md"), ws.resolve("digest/wiki/tools/kettle.md"))
    mem.reconcile()  # e.g. the service's watcher: the index forgets the old path, the ledger still knows it
    ws.write_text("daily/2024-05-09/new.md", "New card\n")  # drift
    assert check(mem)["moved"] == [{"from": "digest/wiki/kettle.md", "to": "digest/wiki/tools/kettle.md"}]
    before = snapshot(mem)

    first = check(mem, fix=True)

    assert first["fixed"]["reindexed"] == ["daily/2024-05-09/new.md"]
    assert [(r["from"], r["to"], sorted(x["path"] for x in r["rewritten"])) for r in first["fixed"]["retargeted"]] == [
        ("digest/wiki/kettle.md", "digest/wiki/tools/kettle.md", ["digest/wiki/pot.md", "digest/wiki/tea.md"])]
    assert first["ok"] is True, {k: first[k] for k in doctor.PROBLEMS if first[k]}
    after = snapshot(mem)
    assert sorted(p for p in after if after[p] != before.get(p)) == ["digest/wiki/pot.md", "digest/wiki/tea.md"]
    pot = ws.read_text("digest/wiki/pot.md")
    assert "uses:: [[digest/wiki/tools/kettle.md#L1]]" in pot and "[[digest/wiki/tea.md#L1|brewing]]" in pot
    assert "[[digest/wiki/tools/kettle.md|kettle]]" in ws.read_text("digest/wiki/tea.md")
    edges = mem.traverse(["digest/wiki/tools/kettle.md"], direction="backward", predicate="uses")["edges"]
    assert [(e["source"], e["anchor"]) for e in edges] == [("digest/wiki/pot.md", "L1")]

    second = check(mem, fix=True)
    assert second["fixed"] == {"reindexed": [], "retargeted": []}
    assert snapshot(mem) == after
    drop = ("seconds", "fixed")
    assert {k: v for k, v in second.items() if k not in drop} == {k: v for k, v in first.items() if k not in drop}


def test_fix_leaves_ambiguous_moves_alone(mem):
    ws = mem.ws
    text = ws.read_text("digest/wiki/kettle.md")
    os.remove(ws.resolve("digest/wiki/kettle.md"))
    ws.write_text("digest/wiki/a/kettle.md", text)
    ws.write_text("digest/wiki/b/kettle.md", text)  # two candidates with the same content
    report = check(mem, fix=True)
    assert report["fixed"]["retargeted"] == [] and report["moved"] == []
    assert [(r["source"], r["target"]) for r in report["broken_links"]] == [
        ("digest/wiki/tea.md", "digest/wiki/kettle.md")]
    assert "[[digest/wiki/kettle.md|kettle]]" in ws.read_text("digest/wiki/tea.md")


def test_near_duplicate_similarity_on_crafted_pairs():
    dup = [(("Ana lives in Lisbon", "Ana moved to Lisbon in May 2024"),
            ("Ana moved to Lisbon", "Where Ana lives now: Lisbon, since May")),
           (("Peanut allergy", "Allergic to peanuts; EpiPen always at hand"),
            ("Allergy to peanuts", "Severe peanut allergy, carries an EpiPen"))]
    distinct = [(("Ana lives in Lisbon", "Ana moved to Lisbon in May 2024"),
                 ("Ana's bakery job", "Ana works at a bakery in Lisbon")),
                (("Allergy to peanuts", "Severe peanut allergy, carries an EpiPen"),
                 ("Allergy to cats", "Mild allergy to cats"))]
    assert all(doctor.similarity(a, b) >= doctor.DUP_THRESHOLD for a, b in dup)
    assert all(doctor.similarity(a, b) < doctor.DUP_THRESHOLD for a, b in distinct)
    items = {f"n{i}": doctor.features(*pair) for i, pair in enumerate(p for pair in dup + distinct for p in pair)}
    brute = sorted((a, b) for a in items for b in items if a < b
                   and len(items[a] & items[b]) / len(items[a] | items[b]) >= 0.2)
    assert sorted(tuple(sorted(p[:2])) for p in doctor.similar_pairs(items, 0.2)) == brute  # prefix filter is exact


def test_doctor_cli_table_json_and_exit_code(mem):
    runner = CliRunner()
    ok = runner.invoke(cli, ["-w", str(mem.ws.root), "doctor"])
    assert ok.exit_code == 0, ok.output
    assert "healthy" in ok.output
    mem.write("digest/wiki/lonely.md", "alone", name="Lonely", metadata={"about": "lonely"})  # as the dream writes
    bad = runner.invoke(cli, ["-w", str(mem.ws.root), "doctor", "--json"])
    assert bad.exit_code == 1
    report = json.loads(bad.output)
    assert [r["path"] for r in report["orphans"]] == ["digest/wiki/lonely.md"]
    table = runner.invoke(cli, ["-w", str(mem.ws.root), "doctor"])
    assert table.exit_code == 1 and "digest/wiki/lonely.md" in table.output and "orphans" in table.output


def test_one_node_name_in_two_buckets_is_a_finding(mem):
    node(mem, "digest/personal/tea.md", "I drink green tea every morning.\n" + sources(CARD), "Tea habit")
    report = check(mem)
    assert report["same_names"] == [{"name": "tea.md", "paths": ["digest/personal/tea.md", "digest/wiki/tea.md"]}]
    assert report["ok"] is False and report["counts"]["same_names"] == 1
    assert doctor.describe("same_names", report["same_names"][0]) == "`digest/personal/tea.md` = `digest/wiki/tea.md`"


def test_a_persons_own_notes_need_no_links_or_sources_and_short_names_are_no_duplicates(mem):
    own = {"digest/project/vite-config.md": "`vite.config.ts`: the dev server proxies /api to :8000.\n",
           "digest/project/vitest-config.md": "`vitest.config.ts`: jsdom, setup file tests/setup.ts.\n",
           "digest/project/deploy-to-staging.md": "Push to the `staging` branch.\n",
           "digest/project/deploy-to-production.md": "Tag a release; CI deploys it.\n"}
    for path, text in own.items():
        mem.write(path, text)  # hand-written: no frontmatter, no facts, no links, no Sources
    report = check(mem)
    assert report["ok"] is True, {k: report[k] for k in doctor.PROBLEMS if report[k]}
    assert report["orphans"] == [] and report["missing_sources"] == [] and report["near_duplicates"] == []
    assert sorted(r["path"] for r in report["unlinked"]) == sorted(own)  # a quiet note, what link-mine could join
    # what the jobs write still has to link and cite: a node of facts citing a card, and the dream's node
    mem.write("digest/project/facts.md", f"- Vite serves on 5173. (source:: [[{CARD}#^f1]]) ^f1\n")
    mem.write("digest/project/dreamt.md", "Nothing cited.\n", metadata={"about": "dreamt"})
    report = check(mem)
    assert sorted((r["path"], r["reason"]) for r in report["missing_sources"]) == [
        ("digest/project/dreamt.md", "no ## Sources section"), ("digest/project/facts.md", "no ## Sources section")]
    assert [r["path"] for r in report["orphans"]] == ["digest/project/dreamt.md"]  # facts.md links its card
    assert report["ok"] is False


def test_the_cli_shows_a_persons_unlinked_note_as_a_note_and_exits_0(mem):
    mem.write("digest/project/build.md", "# Build\n\n`npm run build`\n")
    result = CliRunner().invoke(cli, ["-w", str(mem.ws.root), "doctor"])
    assert result.exit_code == 0, result.output
    assert "healthy" in result.output and "digest/project/build.md" in result.output
    assert "unlinked (note)" in result.output
