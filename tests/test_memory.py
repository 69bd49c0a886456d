"""Memory facade: real files, real DuckDB index, every write visible to search at once."""

import os

import pytest

from storage.errors import Conflict, InvalidInput, NotFound, PathError
from storage.files.day_page import CARDS_END, CARDS_START
from storage.memory import Memory


@pytest.fixture
def mem(tmp_path) -> Memory:
    return Memory(tmp_path / "ws")


def paths(hits):
    return [h["path"] for h in hits]


def scratch_files(root):
    return [os.path.join(d, f) for d, _, files in os.walk(root) for f in files if f.startswith(".") or f.endswith(".tmp")]


# ---- paths ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("bad", ["../evil.md", "daily/../../evil.md", "/etc/passwd", "/tmp/x.md", "metadata/index.duckdb"])
def test_paths_outside_the_workspace_are_refused(mem, bad):
    with pytest.raises(PathError):
        mem.write(bad, content="x")
    with pytest.raises(PathError):
        mem.read(bad)
    assert not (mem.ws.root.parent / "evil.md").exists()


def test_symlink_out_of_the_workspace_is_refused(mem, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("secret")
    os.symlink(outside, mem.ws.root / "daily" / "out")
    with pytest.raises(PathError, match="symlink"):
        mem.write("daily/out/new.md", content="x")
    with pytest.raises(PathError, match="symlink"):
        mem.read("daily/out/secret.md")
    with pytest.raises(PathError):
        mem.move("daily/out/secret.md", "daily/stolen.md")
    assert sorted(p.name for p in outside.iterdir()) == ["secret.md"]
    assert (outside / "secret.md").read_text() == "secret"


# ---- writing -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("call", [
    lambda m: m.search("x", limit=-1), lambda m: m.search("x", limit=10**19), lambda m: m.search("x", expand=10**10),
    lambda m: m.node_search("x", limit=10**19), lambda m: m.traverse(["a.md"], depth=-2),
    lambda m: m.list(limit=-5), lambda m: m.tags(limit=10**12), lambda m: m.daily_list(limit=-1),
    lambda m: m.doctor(stale_days=10**6),
])
def test_absurd_counts_are_refused_clearly(mem, call):
    with pytest.raises(InvalidInput, match="must be between 0 and "):
        call(mem)
    assert mem.search("x", limit=10**9) == [] and mem.list(limit=10**9)["truncated"] is False  # big is fine


def test_write_then_search_finds_it_at_once(mem):
    result = mem.write("digest/wiki/instruments", name="Instruments", description="Odd instruments",
                       content="The xylophone was tuned on Tuesday.\n")
    assert (result["path"], result["created"], result["lines"]) == ("digest/wiki/instruments.md", True, 5)
    assert "digest/wiki/instruments.md" in paths(mem.search("xylophone"))

    mem.edit("digest/wiki/instruments.md", old="xylophone", new="marimba")
    assert "digest/wiki/instruments.md" in paths(mem.search("marimba"))
    assert "digest/wiki/instruments.md" not in paths(mem.search("xylophone"))

    mem.delete("digest/wiki/instruments.md")
    assert paths(mem.search("marimba")) == []


def test_write_is_atomic_and_leaves_no_temp_files(mem, monkeypatch):
    mem.write("daily/2024-05-08/a.md", name="A", content="first version\n")
    for i in range(5):
        mem.write("daily/2024-05-08/a.md", content=f"version {i}\n")
    assert scratch_files(mem.ws.root / "daily") == []

    def crash(*args):
        raise OSError("disk died mid-write")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        mem.write("daily/2024-05-08/a.md", content="never lands\n")
    monkeypatch.undo()
    assert "version 4" in mem.read("daily/2024-05-08/a.md")["content"]
    assert scratch_files(mem.ws.root / "daily") == []


def test_write_keeps_existing_frontmatter_and_create_refuses_existing(mem):
    mem.create("notes/a", name="A", description="first", metadata={"custom": {"nested": [1, 2]}, "tags": ["x"]})
    with pytest.raises(Conflict):
        mem.create("notes/a.md", content="again")
    mem.write("notes/a.md", description="second", content="---\nstatus: open\n---\nnew body\n")
    meta = mem.frontmatter_get("notes/a.md")["frontmatter"]
    assert meta == {"name": "A", "description": "second", "custom": {"nested": [1, 2]}, "tags": ["x"], "status": "open"}
    assert mem.read("notes/a.md", numbered=False)["content"].endswith("new body\n")
    assert not mem.ws.resolve("notes/a").exists()  # `.md` was appended, no stray file


def test_malformed_frontmatter_is_never_overwritten_by_a_merge(mem):
    mem.ws.write_text("notes/bad.md", "---\nname: [unclosed\n---\nbody\n")
    before = mem.ws.read_text("notes/bad.md")
    with pytest.raises(Conflict, match="malformed"):
        mem.frontmatter_update("notes/bad.md", {"status": "x"})
    with pytest.raises(Conflict):
        mem.write("notes/bad.md", name="B", content="y")
    assert mem.ws.read_text("notes/bad.md") == before
    assert mem.frontmatter_get("notes/bad.md")["error"]


def test_edit_requires_exactly_one_match(mem):
    mem.write("notes/e.md", content="apple pie\napple tart\nplum\n")
    with pytest.raises(Conflict, match="2 times"):
        mem.edit("notes/e.md", old="apple", new="pear")
    with pytest.raises(Conflict, match="not found"):
        mem.edit("notes/e.md", old="cherry", new="pear")
    assert mem.ws.read_text("notes/e.md") == "apple pie\napple tart\nplum\n"
    assert mem.edit("notes/e.md", old="apple tart", new="pear tart")["replacements"] == 1
    assert mem.edit("notes/e.md", old="p", new="P", replace_all=True)["replacements"] == 5
    assert mem.ws.read_text("notes/e.md") == "aPPle Pie\nPear tart\nPlum\n"


def test_append_and_prepend_after_frontmatter(mem):
    mem.write("notes/p.md", name="P", content="middle")
    mem.append("notes/p.md", "end")
    mem.prepend("notes/p.md", "start")
    assert mem.ws.read_text("notes/p.md") == "---\nname: P\n---\nstart\nmiddle\nend\n"
    assert mem.append("notes/new.md", "fresh")["created"] is True
    mem.ws.write_text("notes/bad.md", "---\nname: [broken\n---\nbody\n")
    mem.prepend("notes/bad.md", "first")
    assert mem.ws.read_text("notes/bad.md") == "---\nname: [broken\n---\nfirst\nbody\n"
    assert "notes/p.md" in paths(mem.search("start"))


def test_read_line_ranges_are_numbered(mem):
    mem.write("notes/r.md", content="".join(f"line {i}\n" for i in range(1, 21)))
    part = mem.read("notes/r.md", start_line=3, end_line=5)
    assert part["content"] == "     3\tline 3\n     4\tline 4\n     5\tline 5\n"
    assert (part["start_line"], part["end_line"], part["total_lines"]) == (3, 5, 20)
    assert mem.read("notes/r.md", start_line=19, end_line=99)["end_line"] == 20
    with pytest.raises(InvalidInput):
        mem.read("notes/r.md", start_line=9, end_line=3)
    with pytest.raises(InvalidInput):
        mem.read("notes/r.md", start_line=40)
    with pytest.raises(NotFound):
        mem.read("notes/missing.md")
    mem.ws.write_bytes("resource/blob.bin", b"\x00\x01\x02binary")
    with pytest.raises(Conflict, match="binary"):
        mem.read("resource/blob.bin")


def test_a_long_read_is_bounded_and_pages_to_the_end(mem):
    from storage.files.text_view import READ_CHARS

    lines = [f"line {i} " + "x" * (i % 70) for i in range(1, 3001)]
    mem.ws.write_text("notes/long.md", "\n".join(lines) + "\n")
    first = mem.read("notes/long.md")
    assert len(first["content"]) <= READ_CHARS and first["truncated"] is True
    assert first["next_start_line"] == first["end_line"] + 1 and first["total_lines"] == 3000
    pages, at = [], 1
    while at is not None:
        page = mem.read("notes/long.md", start_line=at, numbered=False, max_chars=7_000)
        assert len(page["content"]) <= 7_000 and page["start_line"] == at
        pages.append(page["content"])
        at = page["next_start_line"]
    assert "".join(pages) == "\n".join(lines) + "\n" and page["truncated"] is False and page["end_line"] == 3000
    ranged = mem.read("notes/long.md", start_line=10, end_line=2000, max_chars=100)
    assert ranged["truncated"] and ranged["end_line"] < 2000 and ranged["next_start_line"] == ranged["end_line"] + 1
    mem.ws.write_text("notes/one-line.md", "y" * 50_000 + "\nafter\n")  # one line over the page: cut, marked
    cut = mem.read("notes/one-line.md", numbered=False, max_chars=1_000)
    assert cut["content"] == "y" * 999 + "\n" and cut["cut_line"] == {"line": 1, "shown_chars": 999, "chars": 50_000}
    assert cut["next_start_line"] == 2 and mem.read("notes/one-line.md", start_line=2)["content"] == "     2\tafter\n"
    from storage.files.text_view import read_all

    assert read_all(mem, "notes/one-line.md") == "y" * 50_000 + "\nafter\n"  # jobs read whole files
    assert read_all(mem, "notes/long.md") == "\n".join(lines) + "\n"
    with pytest.raises(InvalidInput, match="max_chars"):
        mem.read("notes/long.md", max_chars=10**7)


# ---- links: move and delete ------------------------------------------------------------------------------

def test_move_rewrites_inbound_links_keeping_anchors_aliases_predicates(mem):
    mem.write("digest/wiki/kyoto.md", name="Kyoto", content="Temples and gardens.\nMore lines.\nEven more.\n")
    mem.write("daily/2024-05-08/trip.md", name="Trip", content=(
        "We went to [[digest/wiki/kyoto.md#L2-L3|the old capital]].\n"
        "located:: [[digest/wiki/kyoto.md]]\n"
        "Also [[digest/wiki/kyoto.md#L1]] and [[digest/wiki/kyoto.md.bak]].\n"
    ))
    mem.write("digest/personal/me.md", content="I love [[digest/wiki/kyoto.md]].\n")
    mem.upload(str(_outside(mem, "raw.md", "see [[digest/wiki/kyoto.md]]")), name="raw.md")

    result = mem.move("digest/wiki/kyoto.md", "digest/wiki/japan/kyoto")
    assert result["to"] == "digest/wiki/japan/kyoto.md"
    assert sorted(r["path"] for r in result["rewritten"]) == ["daily/2024-05-08/trip.md", "digest/personal/me.md"]

    trip = mem.ws.read_text("daily/2024-05-08/trip.md")
    assert "[[digest/wiki/japan/kyoto.md#L2-L3|the old capital]]" in trip
    assert "located:: [[digest/wiki/japan/kyoto.md]]" in trip
    assert "[[digest/wiki/japan/kyoto.md#L1]]" in trip
    assert "[[digest/wiki/kyoto.md.bak]]" in trip  # a different target is left alone
    assert mem.ws.read_text("resource/raw.md") == "see [[digest/wiki/kyoto.md]]"  # raw material never rewritten

    inbound = {link["source"] for link in mem.stat("digest/wiki/japan/kyoto.md")["links_in"]}
    assert inbound == {"daily/2024-05-08/trip.md", "digest/personal/me.md"}
    assert "digest/wiki/japan/kyoto.md" in paths(mem.search("temples"))
    assert "digest/wiki/kyoto.md" not in paths(mem.search("temples"))


def test_move_refuses_to_overwrite(mem):
    mem.write("notes/a.md", content="A")
    mem.write("notes/b.md", content="B")
    with pytest.raises(Conflict, match="overwrite"):
        mem.move("notes/a.md", "notes/b.md")
    with pytest.raises(NotFound):
        mem.move("notes/zzz.md", "notes/c.md")
    assert (mem.ws.read_text("notes/a.md"), mem.ws.read_text("notes/b.md")) == ("A\n", "B\n")


def test_delete_reports_files_that_still_link(mem):
    mem.write("digest/wiki/x.md", content="X [[digest/wiki/x.md]] links itself")
    mem.write("notes/one.md", content="see [[digest/wiki/x.md#L1|x]]")
    mem.write("notes/two.md", content="first line\nrel:: [[digest/wiki/x.md]]")
    result = mem.delete("digest/wiki/x.md")
    assert result["deleted"] is True
    assert sorted((link["source"], link["line"]) for link in result["inbound"]) == [("notes/one.md", 1),
                                                                                    ("notes/two.md", 2)]
    assert not mem.ws.resolve("digest/wiki/x.md").exists()
    with pytest.raises(NotFound):
        mem.delete("digest/wiki/x.md")


# ---- frontmatter, tags, days ------------------------------------------------------------------------------

def test_frontmatter_ops_keep_unknown_keys_and_body(mem):
    text = "---\nname: N\ncustom:\n  nested: [1, 2]\nweird-key: 'keep me'\n---\n# Body\n\nexact   spacing\n"
    mem.ws.write_text("notes/f.md", text)
    mem.frontmatter_update("notes/f.md", {"status": "done", "name": "N2"})
    meta = mem.frontmatter_get("notes/f.md")["frontmatter"]
    assert meta == {"name": "N2", "custom": {"nested": [1, 2]}, "weird-key": "keep me", "status": "done"}
    assert list(meta) == ["name", "custom", "weird-key", "status"]
    result = mem.frontmatter_delete_keys("notes/f.md", ["status", "absent"])
    assert result["deleted"] == ["status"] and result["missing"] == ["absent"]
    assert mem.ws.read_text("notes/f.md").endswith("---\n# Body\n\nexact   spacing\n")
    assert mem.frontmatter_get("notes/f.md")["frontmatter"]["custom"] == {"nested": [1, 2]}


def test_tags_with_stats(mem):
    mem.write("daily/2024-05-08/a.md", content="a", metadata={"tags": ["travel", "food"]})
    mem.write("daily/2024-05-09/b.md", content="b", metadata={"tags": ["travel"]})
    rows = {row["tag"]: row for row in mem.tags()}
    assert rows["travel"]["files"] == 2 and rows["food"]["files"] == 1
    travel = mem.tags(tag="travel")
    assert len(travel) == 1
    assert sorted(p["path"] for p in travel[0]["paths"]) == ["daily/2024-05-08/a.md", "daily/2024-05-09/b.md"]
    assert mem.tags(tag="none-such") == []


def test_daily_reindex_links_cards_and_keeps_handwritten_text(mem):
    mem.write("daily/2024-05-08/trip.md", name="Trip", description="Went to Kyoto", content="Temples.")
    mem.write("daily/2024-05-08/meal.md", name="Meal", description="Ramen | late", content="Ramen.")
    result = mem.daily_reindex("2024-05-08")
    assert result["path"] == "daily/2024-05-08.md" and len(result["cards"]) == 2
    page = mem.ws.read_text("daily/2024-05-08.md")
    assert "- [[daily/2024-05-08/trip.md|Trip]]: Went to Kyoto" in page
    assert "- [[daily/2024-05-08/meal.md|Meal]]: Ramen | late" in page

    mem.append("daily/2024-05-08.md", "My own reflection on the day.")
    mem.write("daily/2024-05-08/walk.md", name="Walk", content="Philosopher's path.")
    mem.daily_reindex("2024-05-08")
    page = mem.ws.read_text("daily/2024-05-08.md")
    assert page.count(CARDS_START) == 1 and page.count(CARDS_END) == 1
    assert "My own reflection on the day." in page
    assert "[[daily/2024-05-08/walk.md|Walk]]" in page
    assert "daily/2024-05-08.md" in {link["source"] for link in mem.stat("daily/2024-05-08/walk.md")["links_in"]}

    days = mem.daily_list()["days"]
    assert days == [{"date": "2024-05-08", "cards": 3, "index_page": True}]
    assert {c["name"] for c in mem.daily_list(date="2024-05-08")["cards"]} == {"Trip", "Meal", "Walk"}
    with pytest.raises(InvalidInput):
        mem.daily_reindex("08/05/2024")


def test_daily_reindex_adds_block_to_a_handwritten_page(mem):
    mem.ws.write_text("daily/2024-06-01.md", "# June 1\n\nWritten by hand.\n")
    mem.write("daily/2024-06-01/card.md", name="Card", content="c")
    mem.daily_reindex("2024-06-01")
    page = mem.ws.read_text("daily/2024-06-01.md")
    assert page.startswith("# June 1\n\nWritten by hand.\n")
    assert "[[daily/2024-06-01/card.md|Card]]" in page


# ---- upload / download, list, index --------------------------------------------------------------------

def _outside(mem, name, text):
    path = mem.ws.root.parent / "outside" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    return path


def test_upload_and_download(mem, tmp_path):
    src = _outside(mem, "paper notes.txt", "the zeppelin manual\n")
    result = mem.upload(str(src), date="2024-05-08")
    assert result["path"] == "resource/2024-05-08/paper notes.txt"
    assert mem.ws.read_text(result["path"]) == "the zeppelin manual\n"
    assert result["path"] in paths(mem.search("zeppelin"))
    with pytest.raises(Conflict):
        mem.upload(str(src), date="2024-05-08")
    with pytest.raises(PathError):
        mem.upload(str(src), name="../../escape.txt")
    with pytest.raises(NotFound):
        mem.upload(str(tmp_path / "missing.txt"))

    out_dir = tmp_path / "exported"
    out_dir.mkdir()
    copied = mem.download(result["path"], str(out_dir))
    assert (out_dir / "paper notes.txt").read_text() == "the zeppelin manual\n"
    assert copied["bytes"] == len("the zeppelin manual\n")
    with pytest.raises(Conflict):
        mem.download(result["path"], str(out_dir))
    mem.download(result["path"], str(out_dir), overwrite=True)
    assert scratch_files(out_dir) == []


def test_list_recursive_prefix_and_limit(mem):
    for name in ("a", "b", "c"):
        mem.write(f"daily/2024-05-08/{name}.md", content=name)
    mem.write("digest/wiki/w.md", content="w")
    everything = [e["path"] for e in mem.list()["entries"]]
    assert everything == ["daily/2024-05-08/a.md", "daily/2024-05-08/b.md", "daily/2024-05-08/c.md",
                          "digest/wiki/w.md"]
    assert [e["path"] for e in mem.list("daily/2024-05-08/b")["entries"]] == ["daily/2024-05-08/b.md"]
    top = mem.list("digest", recursive=False)["entries"]
    assert [(e["path"], e["type"]) for e in top] == [("digest/personal/", "folder"), ("digest/procedure/", "folder"),
                                                     ("digest/wiki/", "folder")]
    limited = mem.list("daily", limit=2)
    assert len(limited["entries"]) == 2 and limited["truncated"] is True and limited["next_offset"] == 2
    rest = mem.list("daily", limit=2, offset=limited["next_offset"])
    assert [e["path"] for e in limited["entries"] + rest["entries"]] == everything[:3]
    assert rest["truncated"] is False and rest["next_offset"] is None
    newest = mem.list(sort="mtime", limit=3)
    assert [e["path"] for e in newest["entries"] + mem.list(sort="mtime", limit=3, offset=3)["entries"]] == [
        e["path"] for e in mem.list(sort="mtime")["entries"]]


def test_reindex_rebuilds_from_files_with_progress(mem, monkeypatch):
    monkeypatch.setenv("DREAMFLOW_CATCH_UP_SECONDS", "0")  # reads answer from the index as it is (no catch-up)
    mem.write("notes/one.md", content="quokka one")
    mem.ws.write_text("notes/two.md", "quokka two, written behind Dreamflow's back")
    assert paths(mem.search("quokka")) == ["notes/one.md"]
    calls = []
    mem.reindex(progress=lambda done, total: calls.append((done, total)))
    assert calls and calls[-1][0] == calls[-1][1] >= 2
    assert sorted(paths(mem.search("quokka"))) == ["notes/one.md", "notes/two.md"]
    assert mem.index_stats()["files"] >= 2


def test_index_stats_count_files_by_bucket(ws):
    mem = Memory(ws.root)
    for path in ("notes.md", "daily/2024-01-01/a.md", "daily/2024-01-02.md", "digest/wiki/k.md", "digest/wiki/l.md",
                 "digest/personal/me.md", "digest/archive/wiki/old.md", "resource/r.txt"):
        mem.write(path, "text")
    assert mem.index_stats()["by_bucket"] == {".": 1, "daily": 2, "digest/archive": 1, "digest/personal": 1,
                                              "digest/wiki": 2, "resource": 1}
