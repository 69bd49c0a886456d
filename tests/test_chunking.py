"""Structure-aware chunking: every chunk is the lines it claims (plus repeated headers/fences/markers)."""

import json
import random
import re

import pytest

from storage.index.chunking import MAX_CHARS, chunk_jsonl, chunk_markdown, chunk_text, split_lines
from storage.text.markdown import parse_file
from storage.text.outline import _scan_fast, parse_blocks

PART = re.compile(r"\n\[Part (\d+)/(\d+)\]$")
WIKILINK = re.compile(r"\[\[[^\[\]\n]+?\]\]")


def assert_faithful(text, chunks, first_line=1, max_chars=None, repeats=()):
    """Each chunk's text is its source lines, except for an `[Part i/N]` marker, a cut long line, and
    repeated header/fence lines listed in `repeats`; every non-blank line is in some chunk."""
    lines = split_lines(text)
    covered = set()
    for c in chunks:
        assert c.text.strip(), "empty chunk"
        assert first_line <= c.start_line <= c.end_line <= first_line + len(lines) - 1
        if max_chars is not None:
            assert len(c.text) <= max_chars, (len(c.text), c.text[:80])
        src = "\n".join(lines[c.start_line - first_line : c.end_line - first_line + 1])
        body = PART.sub("", c.text)
        at = body.find(src)
        if at < 0:  # a piece of one long line, or long lines cut around their ends
            pieces = body.split("\n")
            assert all(p in src for p in pieces if p not in repeats), (body[:80], src[:80])
        else:
            extra = (body[:at] + "\n" + body[at + len(src) :]).split("\n")
            assert all(not x or x in repeats for x in extra), extra
        covered.update(range(c.start_line, c.end_line + 1))
    for n, line in enumerate(lines, first_line):
        if line.strip():
            assert n in covered, f"line {n} lost: {line!r}"
    return chunks


def words(rng, n):
    vocab = "memory agent tea kyoto whisk search index note card daily link graph node".split()
    return " ".join(rng.choice(vocab) for _ in range(n))


# ---------------------------------------------------------------------------------------------- sections


def test_small_document_is_one_chunk_with_its_title_skeleton():
    text = "# Title\n\nIntro.\n\n## Setup\n\nStep one.\n"
    chunks = assert_faithful(text, chunk_markdown(text))
    assert [(c.start_line, c.end_line, c.headings) for c in chunks] == [(1, 7, ("Title",))]
    assert chunk_markdown("") == [] and chunk_markdown("\n \n\t\n") == []


def test_long_document_splits_by_sections_and_packs_small_siblings():
    rng = random.Random(1)
    parts = ["# Guide", "", words(rng, 30), ""]
    sizes = [120, 12, 10, 14, 120, 40, 20]
    for s, size in enumerate(sizes):
        parts += [f"## Part {s}", "", words(rng, size), ""]
        if s == 5:
            parts += ["### Deep", "", words(rng, 40), ""]
    text = "\n".join(parts)
    chunks = assert_faithful(text, chunk_markdown(text, max_chars=600), max_chars=600)
    lines = split_lines(text)
    starts = [i + 1 for i, line in enumerate(lines) if line.startswith("## ")] + [len(lines) + 1]
    for start, nxt in zip(starts, starts[1:]):
        a, b = start, nxt - 1
        while not lines[b - 1].strip():
            b -= 1
        if len("\n".join(lines[a - 1 : b])) <= 600:  # a section that fits is inside one chunk
            assert [c for c in chunks if c.start_line <= a and b <= c.end_line], lines[a - 1]
    by_text = {c.text.split("\n")[0]: c for c in chunks}
    assert by_text["## Part 0"].headings == ("Guide", "Part 0")  # cut: heading joins its first piece
    assert not any(c.text.strip() in ("## Part 0", "## Part 4") for c in chunks)  # no lone heading
    packed = by_text["## Part 1"]
    assert "## Part 2" in packed.text and "## Part 3" in packed.text and packed.headings == ("Guide",)
    deep = [c for c in chunks if "### Deep" in c.text]
    assert len(deep) == 1 and "## Part 5" in deep[0].text and deep[0].headings[:2] == ("Guide", "Part 5")


def test_heading_skeleton_is_outermost_first_and_skips_levels():
    rng = random.Random(2)
    text = "\n".join(
        ["# A", "", "### C under A", "", words(rng, 200), "", "## B", "", words(rng, 200), "", "Setext", "======",
         "", words(rng, 200)]
    )
    chunks = assert_faithful(text, chunk_markdown(text, max_chars=500))
    by_start = {c.start_line: c.headings for c in chunks}
    assert by_start[1] == ("A", "C under A")  # "# A" has no text of its own: it leads C's first piece
    assert chunks[0].text.startswith("# A\n\n### C under A\n\n")
    assert by_start[7] == ("A", "B")
    assert by_start[11] == ("Setext",)


# ---------------------------------------------------------------------------------------------- long blocks


def test_long_table_repeats_its_header_in_every_piece():
    rows = [f"| {i} | {'cell ' * 8}[[daily/2024-01-01.md#L{i}]] |" for i in range(80)]
    text = "Intro paragraph.\n\n| id | value |\n|:---|----:|\n" + "\n".join(rows) + "\n\nAfter.\n"
    for fast in (True, False):
        chunks = chunk_markdown(text, max_chars=700, outline=parse_blocks(text, fast=fast))
        assert_faithful(text, chunks, max_chars=700, repeats=("| id | value |", "|:---|----:|"))
        table = [c for c in chunks if "| id | value |" in c.text]
        assert len(table) > 3
        for c in table:
            assert "| id | value |\n|:---|----:|\n| " in c.text
        seen = [int(m) for c in table for m in re.findall(r"^\| (\d+) \|", c.text, re.M)]
        assert seen == list(range(80))  # every row exactly once, in order


def test_long_fenced_code_repeats_its_fences():
    code = "\n".join(f"    value_{i} = compute({i})  # [[not/a/link.md]]" for i in range(120))
    text = f"## Code\n\n```python\n{code}\n```\n"
    chunks = chunk_markdown(text, max_chars=800, outline=parse_blocks(text))
    assert_faithful(text, chunks, max_chars=800, repeats=("```python", "```"))
    assert len(chunks) > 3
    for c in chunks:
        body = c.text[c.text.index("```python") :]
        assert body.startswith("```python\n") and body.endswith("\n```")
    seen = [int(m) for c in chunks for m in re.findall(r"value_(\d+) =", c.text)]
    assert seen == list(range(120))


def test_long_list_packs_whole_items():
    rng = random.Random(3)
    items = [f"- item {i}: {words(rng, rng.randint(5, 40))}" for i in range(60)]
    nested = ["- parent item", "  - child one " + words(rng, 10), "  - child two " + words(rng, 10)]
    text = "# List\n\n" + "\n".join(items + nested) + "\n"
    for fast in (True, False):
        chunks = chunk_markdown(text, max_chars=500, outline=parse_blocks(text, fast=fast))
        assert_faithful(text, chunks, max_chars=500)
        lines = split_lines(text)
        for c in chunks:
            assert lines[c.start_line - 1].startswith(("# List", "- "))  # a chunk starts at an item
            assert c.headings == ("List",)


def test_long_paragraph_is_split_with_part_markers_and_never_inside_a_wikilink():
    rng = random.Random(4)
    sentence = lambda i: f"Sentence {i} mentions [[digest/wiki/topic-{i}.md#L{i}-L{i + 3}|topic {i}]] {words(rng, 8)}."
    one_line = " ".join(sentence(i) for i in range(80))
    text = "# P\n\n" + one_line + "\n\n" + "\n".join(sentence(i) for i in range(80, 140)) + "\n"
    chunks = chunk_markdown(text, max_chars=400)
    assert_faithful(text, chunks, max_chars=400)
    parts = [PART.search(c.text) for c in chunks]
    assert all(parts[1:]), "every piece of the two long paragraphs is marked"
    assert {int(m.group(2)) for m in parts if m} and all(int(m.group(1)) <= int(m.group(2)) for m in parts if m)
    for c in chunks:
        assert c.text.count("[[") == c.text.count("]]") == len(WIKILINK.findall(c.text))
    found = [m for c in chunks for m in WIKILINK.findall(c.text)]
    assert found == WIKILINK.findall(text)
    pieces = [PART.sub("", c.text) for c in chunks if c.start_line <= 3 <= c.end_line]
    assert len(pieces) > 3 and pieces[0].startswith("# P\n\n")  # the heading leads the first piece
    assert "".join(pieces)[len("# P\n\n") :] == one_line


def test_cjk_text_is_cut_at_sentence_ends_within_the_limit():
    sentence = "我们在京都的茶室里学习了抹茶的点法，老师说要先温碗再放茶粉。"
    text = "# 茶道\n\n" + sentence * 60 + "\n"
    chunks = assert_faithful(text, chunk_markdown(text, max_chars=300), max_chars=300)
    assert len(chunks) > 5
    for c in chunks[1:-1]:
        assert PART.sub("", c.text).endswith("。")


def test_quotes_and_nested_structures_via_marko_stay_faithful():
    rng = random.Random(5)
    quote = "\n".join(f"> {words(rng, 15)}" for _ in range(30))
    nested = "\n".join(f"1. step {i}\n   - detail {words(rng, 12)}\n   - more {words(rng, 12)}" for i in range(20))
    html = "<div>\n" + "\n".join(words(rng, 10) for _ in range(30)) + "\n</div>"
    indented = "\n".join(f"    code line {i}" for i in range(60))
    text = f"# Mixed\n\n{quote}\n\n{nested}\n\n{html}\n\n{indented}\n\nSetext\n---\n\nEnd [[x.md]].\n"
    chunks = chunk_markdown(text, max_chars=450)
    assert_faithful(text, chunks, max_chars=450)
    assert any(c.headings == ("Mixed", "Setext") for c in chunks)


def test_first_line_offsets_every_range():
    text = "# T\n\nbody line\n"
    assert [(c.start_line, c.end_line) for c in chunk_markdown(text, first_line=40)] == [(40, 42)]


# ---------------------------------------------------------------------------------------------- both parsers

PIECES = [
    "word text here", "more [[a/b.md#L1]] text `code`", "# Head", "## Sub head ##", "- item", "* star", "+ plus",
    "1. one", "2) two", "| a | b |", "|---|---|", "| 1 | 2 |", "a | b", "```", "```py", "~~~", "````", "code",
    "", "", "", "**bold** x", "- [ ] task", "x|y", "|:-:|", "#", "1. # x", "> quote", "    indented", "  two",
    "---", "===", "***", "[ref]: /url", "<div>", "-  wide", "-", "2024. year", "- - -",
]


def tree(blocks):
    return [(b.kind, b.start, b.end, b.level, b.title, tree(b.children), b.rows) for b in blocks]


def test_line_scan_and_marko_give_the_same_blocks_and_chunks():
    rng = random.Random(6)
    fast_docs = 0
    for _ in range(3000):
        text = "\n".join(rng.choice(PIECES) for _ in range(rng.randint(1, 14))) + rng.choice(["", "\n"])
        scanned, slow = _scan_fast(split_lines(text)), parse_blocks(text, fast=False)
        if scanned is None:
            continue  # outside the subset: marko parses it (by segments, see the next test)
        fast_docs += 1
        assert tree(scanned) == tree(slow.blocks), text
        fast = parse_blocks(text)
        assert chunk_markdown(text, max_chars=40, outline=fast) == chunk_markdown(text, max_chars=40, outline=slow)
    assert fast_docs > 500


def test_segmented_parsing_finds_the_same_leaves_and_headings_as_marko():
    rng = random.Random(10)
    extra = ["- a\n  - nested", "> q\n> q2", "```\n\nx\n\n# not heading\n```", "  ```\n  in item\n\nz", "<div>\n\n</div>",
             "1. a\n\n   para", "<!-- c\n\n# hidden -->", "~~~~\n~~~\n\n# in\n~~~~", "- ```\n  x\n\n- y",
             "- <div>", "* * *", "Foo\n---", "  - deep\n    - deeper", "> - quoted item", "- > quote in item",
             "\t- tab item", "-\tx", "+ plus\n+ plus2", "- a\n\n  ```\n  in item fence", "<span>x</span>"]
    for _ in range(1500):
        text = "\n".join(rng.choice(PIECES + extra) for _ in range(rng.randint(1, 16)))
        fast, slow = parse_blocks(text), parse_blocks(text, fast=False)
        assert fast.leaves() == slow.leaves(), text
        heads = lambda o: [(b.start, b.title) for b in o.blocks if b.kind == "heading"]
        assert heads(fast) == heads(slow), text


# ---------------------------------------------------------------------------------------------- other files


def test_jsonl_chunks_by_records_with_exact_lines():
    rng = random.Random(7)
    records = [{"role": rng.choice(["user", "assistant"]), "content": words(rng, rng.randint(5, 60)), "n": i}
               for i in range(50)]
    lines = [json.dumps(r) for r in records]
    lines.insert(10, "")  # blank line: skipped
    lines.insert(20, "{not json at all")
    lines.append(json.dumps({"role": "user", "content": "京都 " * 400}, ensure_ascii=True))  # one oversized record
    text = "\n".join(lines) + "\n"
    chunks = chunk_jsonl(text, max_chars=600)
    src = split_lines(text)
    for c in chunks:
        assert src[c.start_line - 1].strip() and src[c.end_line - 1].strip()
        assert len(c.text) <= 600
    covered = sorted({n for c in chunks for n in range(c.start_line, c.end_line + 1)})
    assert covered == list(range(1, len(src) + 1))
    assert any("{not json at all" in c.text for c in chunks)
    first = chunks[0]
    assert first.text.startswith(f"role: {records[0]['role']}\ncontent: {records[0]['content']}\nn: 0")
    big = [c for c in chunks if c.start_line == len(src)]
    assert len(big) > 1 and all(PART.search(c.text) for c in big) and "京都" in big[0].text


def test_plain_text_chunks_by_size_with_overlap_and_long_lines():
    rng = random.Random(8)
    lines = [words(rng, rng.randint(3, 15)) for _ in range(200)] + ["x" * 2000]
    text = "\n".join(lines)
    chunks = chunk_text(text, max_chars=400, overlap=2)
    assert_faithful(text, chunks, max_chars=400)
    normal = [c for c in chunks if c.end_line < 201]
    for a, b in zip(normal, normal[1:]):
        assert b.start_line == a.end_line - 1  # two lines shared
    assert [c.start_line for c in chunks if c.start_line == 201] and PART.search(chunks[-1].text)
    assert chunk_text("") == [] and chunk_text("\n\n") == []


def test_parse_file_chunks_every_kind_within_the_default_size(tmp_path):
    rng = random.Random(9)
    md = "# Note\n\n" + "\n\n".join(words(rng, 60) for _ in range(40))
    parsed = parse_file("daily/2024-01-01/note.md", md.encode())
    assert len(parsed.chunks) > 3
    assert all(len(c.text) <= MAX_CHARS for c in parsed.chunks)
    assert_faithful(md, parsed.chunks)
    yml = "\n".join(f"- topic: {words(rng, 6)}" for _ in range(100))
    assert_faithful(yml, parse_file("resource/2024-01-01/topics.yaml", yml.encode()).chunks)


@pytest.mark.parametrize("max_chars", [60, 200, 1000])
def test_random_documents_stay_faithful_at_any_size(max_chars):
    rng = random.Random(max_chars)
    blocks = [
        lambda: f"## {words(rng, 3)}",
        lambda: words(rng, rng.randint(1, 80)),
        lambda: "\n".join(f"- {words(rng, rng.randint(1, 20))}" for _ in range(rng.randint(1, 8))),
        lambda: "| a | b |\n|---|---|\n" + "\n".join(f"| {words(rng, 2)} | {words(rng, 5)} |" for _ in range(5)),
        lambda: "```\n" + "\n".join(words(rng, 6) for _ in range(rng.randint(1, 10))) + "\n```",
        lambda: "\n".join(f"> {words(rng, 8)}" for _ in range(rng.randint(1, 5))),
    ]
    for _ in range(60):
        text = "\n\n".join(rng.choice(blocks)() for _ in range(rng.randint(1, 12))) + "\n"
        repeats = ("| a | b |", "|---|---|", "```")
        assert_faithful(text, chunk_markdown(text, max_chars=max_chars), repeats=repeats)


def test_a_heading_longer_than_two_chunks_is_cut_like_any_long_line():
    """Hypothesis found it: a heading of one 3,200-character word was one chunk of 3,202 characters."""
    from storage.text.markdown import parse_file

    for text in ("# " + "long" * 800, "# T\n\n## " + "long" * 800 + "\ntext\n"):
        chunks = parse_file("digest/wiki/a.md", text.encode()).chunks
        assert chunks and all(len(c.text) <= MAX_CHARS for c in chunks), [len(c.text) for c in chunks]


NODE = """---
name: Ana
---
# Ana

Ana is my sister.

## Facts

- Ana lives in Lisbon. (about:: Ana) (since:: 2026-11-04) (source:: [[daily/2026-11-04/move.md#^f1]]) ^f2
- Ana works at a bakery in Alfama. (about:: Ana) (since:: 2026-01-10) ^f3
- a note a person added
- and one more

## Open questions

## History

- Ana lives in Porto. (about:: Ana) (since:: 2026-11-02) (until:: 2026-11-04) (replaced_by:: [[digest/people/ana.md#^f2]]) ^f1

## Sources

- [[daily/2026-11-04/move.md]]
"""


def test_each_fact_line_is_a_chunk_of_its_own_the_rest_as_before():
    chunks = parse_file("digest/people/ana.md", NODE.encode()).chunks
    lines = split_lines(NODE)
    facts = [c for c in chunks if c.search_text]
    assert [(c.start_line, c.end_line) for c in facts] == [(10, 10), (11, 11), (19, 19)]
    assert all(c.text == lines[c.start_line - 1] for c in facts)  # the exact line: what search shows
    assert [c.headings for c in facts] == [("Ana", "Facts"), ("Ana", "Facts"), ("Ana", "History")]
    # the sentence and `about`, no inline fields; then the fact it replaced (its retrieval keys)
    assert facts[0].search_text == "Ana lives in Lisbon.\nAna\nAna lives in Porto. Ana"
    assert facts[1].search_text == "Ana works at a bakery in Alfama.\nAna"  # replaced nothing
    assert [(c.valid_from, c.valid_to) for c in facts] == [("2026-11-04", None), ("2026-01-10", None),
                                                          ("2026-11-02", "2026-11-04")]
    rest = [(c.text, c.start_line, c.end_line) for c in chunks if not c.search_text]
    # headings alone and the list of sources (links, not something said) are not chunks
    assert rest == [("# Ana\n\nAna is my sister.", 4, 6), ("- a note a person added\n- and one more", 12, 13)]
    card = parse_file("daily/2026-11-04/move.md", NODE.encode()).chunks  # a card's facts: their day is the path's
    assert [c.text for c in card] == [c.text for c in chunks] and not any(c.valid_from or c.valid_to for c in card)


def test_a_body_without_facts_chunks_as_it_did():
    body = NODE.replace(" ^f", " f")  # no block ids: no facts
    before = chunk_markdown(body)
    assert not any(c.search_text for c in before)
    assert len(before) == 1 and before[0].text == body.rstrip("\n")  # one small document: one chunk, as always
