"""Tasks' own logic, fast: each task's function called directly (`task.fn(...)`, as Prefect's examples test them) on
a real temp workspace, no flow run and no Prefect server. The flows that compose them keep their tests (the Prefect
test harness, tests/test_flows_*.py and test_governance.py)."""

import numpy as np
import pytest

from engine.access.job_workspace import metadata_of
from storage.files import checkpoints
from storage.index import vectors
from storage.index.db import IndexDB
from storage.memory import Memory
from storage.text.markdown import split_frontmatter
from tasks.governance import CHECKPOINT, archive_node, doctor_report, mining_queue
from tasks.maintenance import compact_index, index_stats, reconcile_index

SOURCES = "\n## Sources\n\n- 2024-05-08: noted\n"


@pytest.fixture
def mem(ws, monkeypatch) -> Memory:
    monkeypatch.setenv("DREAMFLOW_EMBEDDER", "none")
    return Memory(ws.root)


def test_archive_node_moves_the_node_retargets_its_links_and_marks_it_archived(mem, ws):
    mem.write("digest/wiki/phone.md", "Phone plan details.\n" + SOURCES, name="Phone")
    mem.write("digest/personal/me.md", "My [[digest/wiki/phone.md|phone]].\n" + SOURCES, name="Me")
    out = archive_node.fn(str(ws.root), "digest/wiki/phone.md", "2024-06-01")
    assert (out["status"], out["detail"]) == ("done", "→ digest/archive/wiki/phone.md")
    assert out["changed"] == ["digest/archive/wiki/phone.md", "digest/personal/me.md"]
    assert out["deleted"] == ["digest/wiki/phone.md"] and not (ws.root / "digest/wiki/phone.md").exists()
    archived = split_frontmatter((ws.root / "digest/archive/wiki/phone.md").read_text())
    assert archived.meta["archived"] == "2024-06-01"
    assert "My [[digest/archive/wiki/phone.md|phone]]." in (ws.root / "digest/personal/me.md").read_text()


def test_archive_node_skips_what_is_not_a_live_node_or_already_archived_and_changes_nothing(mem, ws):
    mem.write("digest/wiki/fax.md", "Fax.\n" + SOURCES, name="Fax")
    mem.write("digest/archive/wiki/fax.md", "An older fax.\n" + SOURCES, name="Fax")
    mem.write("notes/n.md", "a note")
    taken = archive_node.fn(str(ws.root), "digest/wiki/fax.md", "2024-06-01")
    assert (taken["status"], taken["detail"]) == ("skipped", "digest/archive/wiki/fax.md already exists")
    for path in ("notes/n.md", "digest/archive/wiki/fax.md", "digest/wiki/missing.md"):
        assert archive_node.fn(str(ws.root), path, "2024-06-01")["detail"] == "not a live digest node"
    assert (ws.root / "digest/wiki/fax.md").read_text().count("Fax.") == 1
    assert "An older fax." in (ws.root / "digest/archive/wiki/fax.md").read_text()


def test_doctor_report_names_an_orphan_node_and_fix_keeps_it(mem, ws):
    mem.write("digest/wiki/lonely.md", "Alone.", name="Lonely", metadata={"about": "lonely"})
    report = doctor_report.fn(str(ws.root))
    assert report["ok"] is False and [o["path"] for o in report["orphans"]] == ["digest/wiki/lonely.md"]
    fixed = doctor_report.fn(str(ws.root), fix=True)
    assert "fixed" in fixed and (ws.root / "digest/wiki/lonely.md").is_file()


def test_mining_queue_takes_the_given_paths_else_the_changed_nodes_and_defers_the_rest(mem, ws):
    for name in ("a", "b", "c"):
        mem.write(f"digest/wiki/{name}.md", f"Node {name}.\n" + SOURCES, name=name.upper())
    mem.write("digest/archive/wiki/old.md", "Old.\n" + SOURCES, name="Old")
    given = mining_queue.fn(str(ws.root), ["digest/wiki/b.md", "digest/wiki/b.md"], 1)
    assert given == {"paths": ["digest/wiki/b.md"], "deferred": []}
    queue = mining_queue.fn(str(ws.root), None, 2)
    assert queue == {"paths": ["digest/wiki/a.md", "digest/wiki/b.md"], "deferred": ["digest/wiki/c.md"]}
    entry = next(e for e in mem.list("digest/wiki")["entries"] if e["path"] == "digest/wiki/a.md")
    with checkpoints.update(metadata_of(str(ws.root)), CHECKPOINT) as data:  # a mined, unchanged since
        data["files"] = {"digest/wiki/a.md": f"{entry['size']}:{entry['mtime']}"}
    assert mining_queue.fn(str(ws.root), None, 5)["paths"] == ["digest/wiki/b.md", "digest/wiki/c.md"]


def test_reconcile_then_compact_index_catch_up_with_a_file_written_behind_the_back_and_prune_vectors(mem, ws):
    mem.write("digest/wiki/a.md", "Alpha beta.")
    assert index_stats.fn(str(ws.root))["files"] == 1
    ws.write_text("digest/wiki/b.md", "Gamma written behind Dreamflow's back.")
    with IndexDB(ws).session() as con:  # vectors of a text no chunk has any more (an edited-away version)
        vectors.use_model(con, "test-model", 2)
        vectors.store(con, "test-model", [("gone-text-hash", np.ones((1, 2), dtype=np.float32))])
    assert reconcile_index.fn(str(ws.root))["added"] == 1
    compacted = compact_index.fn(str(ws.root))
    assert compacted["compacted"] is True and compacted["vectors_pruned"] == 1
    assert index_stats.fn(str(ws.root))["files"] == 2
    assert mem.search("gamma")[0]["path"] == "digest/wiki/b.md"
