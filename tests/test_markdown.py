"""Frontmatter, wikilinks, link rewriting and parse_file, on real files in a workspace."""

import datetime as dt
import json
import random

import pytest

from storage.text.markdown import (
    parse_file,
    parse_links,
    render_frontmatter,
    rewrite_links,
    split_frontmatter,
    split_lines,
)
from storage.text.model import Link


def parse(ws, rel, text):
    """Write `text` into the workspace and parse the file from its bytes on disk."""
    data = text.encode() if isinstance(text, str) else text
    ws.write_bytes(rel, data)
    return parse_file(rel, ws.read_bytes(rel))


CARD = """---
name: Tea ceremony
description: How Alice prepares matcha
tags: [tea, japan]
custom_key: keep me
nested:
  b: 2
  a: 1
when: 2024-03-01
flag: 'yes'
source_conversation: "[[session/dialog/s1.jsonl#L3-L9]]"
---
# Matcha

Alice whisks [[digest/wiki/matcha.md|matcha]] every morning.
"""


# ---------------------------------------------------------------------------------------------- frontmatter


def test_frontmatter_round_trip_keeps_unknown_keys_order_and_dates():
    fm = split_frontmatter(CARD)
    assert fm.error is None
    assert list(fm.meta) == [
        "name", "description", "tags", "custom_key", "nested", "when", "flag", "source_conversation",
    ]
    assert fm.meta["when"] == dt.date(2024, 3, 1)
    assert fm.meta["flag"] == "yes"
    assert list(fm.meta["nested"]) == ["b", "a"]
    assert fm.body == "# Matcha\n\nAlice whisks [[digest/wiki/matcha.md|matcha]] every morning.\n"
    assert fm.body_line == 13 and fm.end_line == 12
    assert CARD.split("\n")[fm.body_line - 1] == "# Matcha"

    again = split_frontmatter(render_frontmatter(fm.meta, fm.body))
    assert again.meta == fm.meta and list(again.meta) == list(fm.meta)
    assert again.body == fm.body and again.body_line == fm.body_line

    meta = dict(fm.meta)
    meta["description"] = "Updated"
    meta["added"] = dt.datetime(2024, 5, 6, 7, 8, 9)
    updated = split_frontmatter(render_frontmatter(meta, fm.body))
    assert list(updated.meta) == list(fm.meta) + ["added"]
    assert updated.meta["description"] == "Updated"
    assert updated.meta["when"] == dt.date(2024, 3, 1)
    assert updated.meta["added"] == dt.datetime(2024, 5, 6, 7, 8, 9)
    assert updated.meta["flag"] == "yes"  # still a string, not a boolean
    assert updated.meta["nested"] == {"b": 2, "a": 1}


def test_render_is_identity_on_canonical_yaml_and_empty_meta_writes_no_block():
    text = "---\nname: A\ndescription: B long text that should not be folded " + "x" * 120 + "\n---\nbody\n"
    fm = split_frontmatter(text)
    assert render_frontmatter(fm.meta, fm.body) == text
    assert render_frontmatter({}, "just body\n") == "just body\n"
    assert render_frontmatter({"name": "unicode 茶道"}, "") == "---\nname: unicode 茶道\n---\n"


def test_no_frontmatter_and_unclosed_block_are_plain_body():
    assert split_frontmatter("# Title\n").meta == {}
    fm = split_frontmatter("---\nname: x\nno closing fence\n")
    assert fm.meta == {} and fm.error is None and fm.body_line == 1 and fm.raw is None
    empty = split_frontmatter("---\n---\nbody\n")
    assert empty.meta == {} and empty.error is None and empty.body == "body\n" and empty.body_line == 3


def test_malformed_yaml_is_reported_and_the_whole_file_still_indexed(ws):
    text = "---\nname: Broken\ndescription: [unclosed\nother: 1\n---\n# Body\n\nsee [[digest/wiki/a.md]]\n"
    fm = split_frontmatter(text)
    assert fm.meta == {} and fm.error and "malformed frontmatter" in fm.error
    assert fm.body == text and fm.body_line == 1  # re-rendering cannot drop the unparsed block
    assert fm.raw == "name: Broken\ndescription: [unclosed\nother: 1\n" and fm.end_line == 5

    parsed = parse(ws, "digest/wiki/broken.md", text)
    assert parsed.kind == "markdown"
    assert len(parsed.errors) == 1 and "malformed frontmatter" in parsed.errors[0]
    assert parsed.name is None and parsed.frontmatter == {}
    lines = split_lines(text)
    covered = {n for c in parsed.chunks for n in range(c.start_line, c.end_line + 1)}
    assert {2, 3, 4, 6, 8} <= covered  # YAML lines and body lines are all searchable
    for chunk in parsed.chunks:
        assert chunk.text == "\n".join(lines[chunk.start_line - 1 : chunk.end_line])
    assert parsed.links == [Link("digest/wiki/a.md", 8)]


@pytest.mark.parametrize("yaml_text", ["- a\n- b\n", "just a string\n", "42\n"])
def test_frontmatter_that_is_not_a_mapping_is_an_error_not_a_crash(ws, yaml_text):
    text = f"---\n{yaml_text}---\nbody text\n"
    fm = split_frontmatter(text)
    assert fm.meta == {} and "not a mapping" in fm.error
    parsed = parse(ws, "daily/2024-01-02/x.md", text)
    assert any("not a mapping" in e for e in parsed.errors)
    body_line = yaml_text.count("\n") + 3
    assert any(c.text == "body text" and c.start_line == body_line for c in parsed.chunks)


def test_crlf_and_bom_files_keep_line_numbers(ws):
    text = "\ufeff---\r\nname: Win\r\n---\r\n# T\r\n\r\nlink [[a.md#L2]] here\r\n"
    parsed = parse(ws, "digest/wiki/win.md", text)
    assert parsed.name == "Win" and parsed.errors == []
    assert parsed.links == [Link("a.md", 6, "L2")]
    assert [(c.start_line, c.end_line, c.text) for c in parsed.chunks] == [(4, 6, "# T\n\nlink [[a.md#L2]] here")]
    assert parsed.line_count == 6


def test_tags_and_dates(ws):
    assert parse(ws, "a.md", "---\ntags: [a, '#b', a]\n---\nx\n").tags == ["a", "b"]
    assert parse(ws, "a.md", "---\ntags: a, b c\n---\nx\n").tags == ["a", "b c"]
    assert parse(ws, "a.md", "---\ntags: '#x #y'\n---\nx\n").tags == ["x", "y"]
    assert parse(ws, "a.md", "---\ntags: 7\n---\nx\n").tags == []

    assert parse(ws, "daily/2024-02-03.md", "x").date == "2024-02-03"
    assert parse(ws, "daily/2024-02-03/card.md", "x").date == "2024-02-03"
    assert parse(ws, "resource/2024-02-03/paper.txt", "x").date == "2024-02-03"
    assert parse(ws, "daily/2024-02-30.md", "x").date is None  # not a real day
    assert parse(ws, "digest/wiki/2024-02-03.md", "x").date is None
    assert parse(ws, "digest/wiki/a.md", "---\ndate: 2023-05-08\n---\nx").date == "2023-05-08"
    assert parse(ws, "digest/wiki/a.md", "---\ndate: '2023-05-08T10:00:00'\n---\nx").date == "2023-05-08"
    # an explicit date key wins over the date in the path; a bad one is reported and the path date kept
    assert parse(ws, "daily/2024-02-03/c.md", "---\ndate: 2023-05-08 10:00:00\n---\nx").date == "2023-05-08"
    bad = parse(ws, "daily/2024-02-03/c.md", "---\ndate: someday\n---\nx")
    assert bad.date == "2024-02-03" and any("someday" in e for e in bad.errors)


def test_parse_file_reads_name_description_and_json_ready_frontmatter(ws):
    parsed = parse(ws, "daily/2024-03-01/tea.md", CARD)
    assert (parsed.kind, parsed.name, parsed.description) == ("markdown", "Tea ceremony", "How Alice prepares matcha")
    assert parsed.tags == ["tea", "japan"] and parsed.date == "2024-03-01"
    assert parsed.frontmatter["when"] == "2024-03-01"
    assert list(parsed.frontmatter) == list(split_frontmatter(CARD).meta)
    json.dumps(parsed.frontmatter)
    assert parsed.line_count == 15 and parsed.errors == []
    assert parsed.chunks[0].start_line == 13 and parsed.chunks[0].headings == ("Matcha",)


def test_frontmatter_only_file_yields_one_chunk(ws):
    parsed = parse(ws, "digest/wiki/stub.md", "---\nname: Stub node\ndescription: Only metadata\n---\n\n")
    assert [(c.start_line, c.end_line) for c in parsed.chunks] == [(2, 3)]
    assert "Stub node" in parsed.chunks[0].text and "Only metadata" in parsed.chunks[0].text


# ---------------------------------------------------------------------------------------------- wikilinks

LINKS = """# Links

Plain [[daily/2024-01-01.md]] and alias [[digest/wiki/tea.md|Tea]] and anchor [[a.md#L9]].
Ranges [[resource/p.txt#L9-L10,L15-L20|quote]] and spaced [[ spaced/x.md # L3 | Alias ]] and embed ![[img.png]].
Self [[#L5]] is no edge. Literal targets [[Some Title]] stay as written, no .md added.
| col | link |
|-----|------|
| 1 | [[t.md\\|table alias]] |

Inline `[[code/span.md]]` and ``double `[[code/two.md]]` ticks`` and stray ` tick [[after/tick.md]].

```
[[fenced/backtick.md]]
```

~~~md
[[fenced/tilde.md]]
~~~

    [[indented/code.md]]

- list item
  ```
  [[fenced/in-list.md]]
  ```
- [[in/list.md]] after
"""


def test_wikilink_forms_skip_code_and_keep_lines():
    links = parse_links(LINKS)
    assert links == [
        Link("daily/2024-01-01.md", 3),
        Link("digest/wiki/tea.md", 3, alias="Tea"),
        Link("a.md", 3, anchor="L9"),
        Link("resource/p.txt", 4, anchor="L9-L10,L15-L20", alias="quote"),
        Link("spaced/x.md", 4, anchor="L3", alias="Alias"),
        Link("img.png", 4),
        Link("Some Title", 5),
        Link("t.md", 8, alias="table alias"),
        Link("after/tick.md", 10),
        Link("in/list.md", 26),
    ]
    lines = LINKS.split("\n")
    for link in links:
        assert link.target.split("/")[0].strip() in lines[link.line - 1]
    shifted = parse_links(LINKS, first_line=11)
    assert [k.line for k in shifted] == [k.line + 10 for k in links]


TYPED = """# Typed

uses:: [[tools/whisk.md]]
- contradicts:: [[digest/wiki/old.md#L2]]
* [ ] part_of:: [[digest/wiki/tea.md|Tea]]
uses:: [[[a.md]], [[b.md#L1]]]
uses:: [ [[c.md]], [[d.md]] ]
related:: [[legacy.md]]
**derived_from**:: [[bold.md]]
Prose (cites:: [[paren.md]]) then plain [[plain.md]] and [supports:: [[bracket.md]]] end [[plain2.md]].
first:: [[one.md]] second:: [[two.md]]
A `std::vector` [[after-code.md]] and [[odd::target.md]].
"""


def test_typed_links_carry_their_predicate():
    got = [(k.target, k.predicate, k.line) for k in parse_links(TYPED)]
    assert got == [
        ("tools/whisk.md", "uses", 3),
        ("digest/wiki/old.md", "contradicts", 4),
        ("digest/wiki/tea.md", "part_of", 5),
        ("a.md", "uses", 6),
        ("b.md", "uses", 6),
        ("c.md", "uses", 7),
        ("d.md", "uses", 7),
        ("legacy.md", "related", 8),
        ("bold.md", "derived_from", 9),
        ("paren.md", "cites", 10),
        ("plain.md", None, 10),
        ("bracket.md", "supports", 10),
        ("plain2.md", None, 10),
        ("one.md", "first", 11),
        ("two.md", "second", 11),
        ("after-code.md", None, 12),
        ("odd::target.md", None, 12),
    ]
    assert parse_links(TYPED)[1].anchor == "L2" and parse_links(TYPED)[2].alias == "Tea"


def test_frontmatter_links_are_links_with_their_key_and_line(ws):
    text = (
        "---\nname: Card\nsource_conversation: \"[[session/dialog/s1.jsonl]]\"\nsources:\n"
        "  - \"[[resource/a.pdf#L2]]\"\n- '[[resource/b.txt]]'\n---\nBody [[x.md]]\n"
    )
    expected = [
        Link("session/dialog/s1.jsonl", 3, predicate="source_conversation"),
        Link("resource/a.pdf", 5, anchor="L2", predicate="sources"),
        Link("resource/b.txt", 6, predicate="sources"),
        Link("x.md", 8),
    ]
    assert parse_links(text) == expected
    assert parse(ws, "daily/2024-01-01/card.md", text).links == expected
    broken = "---\nsource: \"[[s.jsonl]]\"\nbad: [x\n---\n[[y.md]]\n"
    assert parse(ws, "daily/2024-01-01/bad.md", broken).links == [Link("s.jsonl", 2, predicate="source"), Link("y.md", 5)]


def test_link_line_numbers_point_at_the_link_in_the_original_file(ws):
    body = "\n".join(
        f"- fact {i} [[daily/2024-01-{i % 28 + 1:02d}.md#L{i}]]" if i % 3 else f"para {i} [[p{i}.md]]"
        for i in range(60)
    )
    text = "---\nname: Many\ndescription: d\n---\n# Many\n\n" + body + "\n"
    parsed = parse(ws, "digest/wiki/many.md", text)
    lines = split_lines(text)
    assert len(parsed.links) == 60
    for link in parsed.links:
        assert f"[[{link.target}" in lines[link.line - 1]


# ---------------------------------------------------------------------------------------------- rewriting


def test_rewrite_links_keeps_anchor_alias_predicate_and_skips_code():
    text = (
        '---\nname: R\nsource: "[[old/a.md#L1]]"\n---\n'
        "See [[old/a.md]], [[old/a.md#L3-L4|alias]], ![[old/a.md]] and [[ old/a.md | spaced ]].\n"
        "uses:: [[old/a.md#L9]]\n"
        "Not [[old/a.md.bak]] nor [[x/old/a.md]] nor [[Old/a.md]].\n"
        "`[[old/a.md]]` in code\n\n```\n[[old/a.md]]\n```\n"
    )
    new, count = rewrite_links(text, "old/a.md", "new/b.md")
    assert count == 6
    assert new == (
        '---\nname: R\nsource: "[[new/b.md#L1]]"\n---\n'
        "See [[new/b.md]], [[new/b.md#L3-L4|alias]], ![[new/b.md]] and [[ new/b.md | spaced ]].\n"
        "uses:: [[new/b.md#L9]]\n"
        "Not [[old/a.md.bak]] nor [[x/old/a.md]] nor [[Old/a.md]].\n"
        "`[[old/a.md]]` in code\n\n```\n[[old/a.md]]\n```\n"
    )
    before = [k for k in parse_links(text) if k.target == "old/a.md"]
    after = [k for k in parse_links(new) if k.target == "new/b.md"]
    assert [(k.line, k.anchor, k.alias, k.predicate) for k in before] == [
        (k.line, k.anchor, k.alias, k.predicate) for k in after
    ]
    assert split_frontmatter(new).meta["source"] == "[[new/b.md#L1]]"


def test_rewrite_links_preserves_crlf_table_escapes_and_reports_zero():
    text = "| a | b |\r\n|---|---|\r\n| 1 | [[x.md\\|X]] |\r\n\r\nand [[x.md#L2]]\r\n"
    new, count = rewrite_links(text, "x.md", "dir/y.md")
    assert count == 2
    assert new == text.replace("[[x.md", "[[dir/y.md")
    assert rewrite_links(text, "missing.md", "z.md") == (text, 0)
    with pytest.raises(ValueError):
        rewrite_links(text, "x.md", "bad]]name")
    with pytest.raises(ValueError):
        rewrite_links(text, "x.md", "has#hash")


# ---------------------------------------------------------------------------------------------- kinds


def test_binary_files_are_recognised_and_never_raise(ws):
    png = parse(ws, "resource/pic.png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    assert png.kind == "binary" and png.chunks == [] and png.links == [] and "binary" in png.errors[0]
    latin1 = parse(ws, "resource/old.txt", "caf\u00e9 cr\u00e8me".encode("latin-1"))  # a few bad bytes: text
    assert latin1.kind == "text" and latin1.chunks[0].text == "caf\ufffd cr\ufffdme" and "U+FFFD" in latin1.errors[0]
    late_nul = parse(ws, "resource/late.md", b"# ok\n" + b"x" * 9000 + b"\x00")
    assert late_nul.kind == "markdown"  # only the first 8 KB are sniffed for NUL; valid UTF-8 otherwise
    text_bin = parse(ws, "resource/notes.bin", "plain words".encode())
    assert text_bin.kind == "text" and text_bin.chunks[0].text == "plain words"
    empty = parse(ws, "daily/2024-01-01/empty.md", b"")
    assert (empty.kind, empty.chunks, empty.line_count, empty.errors) == ("markdown", [], 0, [])


def test_jsonl_and_other_text_kinds(ws):
    records = [{"role": "user", "content": "我们去京都喝抹茶"}, {"role": "assistant", "content": "好的\nsure"}]
    data = "\n".join(json.dumps(r) for r in records) + "\n{broken json\n"
    parsed = parse(ws, "session/dialog/s1.jsonl", data)
    assert parsed.kind == "jsonl" and parsed.line_count == 3 and parsed.links == []
    assert [(c.start_line, c.end_line) for c in parsed.chunks] == [(1, 3)]
    assert "京都" in parsed.chunks[0].text and "{broken json" in parsed.chunks[0].text
    log = parse(ws, "resource/log.jsonl", data)  # not a conversation: every field as `key: value`
    assert log.chunks[0].text.startswith("role: user\ncontent: 我们去京都喝抹茶") and log.chunks[0].search_text is None
    csv = parse(ws, "resource/t.csv", "h1,h2\n" + "\n".join(f"{i},{'v' * 50}" for i in range(100)))
    assert csv.kind == "text" and len(csv.chunks) > 1
    assert all(c.text.startswith("h1,h2\n") for c in csv.chunks)


def test_parse_file_never_raises_on_garbage(ws):
    rng = random.Random(3)
    alphabet = list("[]|#:`~->*_\n \t|-=!()abc\\\r") + ["[[", "]]", "```", "---\n", "::", "\ufeff", "世"]
    for i in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 200)))
        for rel in ("digest/wiki/g.md", "session/dialog/g.jsonl", "resource/g.txt"):
            parsed = parse_file(rel, text.encode())
            lines = split_lines(text)
            for chunk in parsed.chunks:
                assert 1 <= chunk.start_line <= chunk.end_line <= max(len(lines), 1)
                assert chunk.text.strip()
            for link in parsed.links:
                assert 1 <= link.line <= len(lines)


def test_python_frontmatter_splits_with_the_bounded_loader():
    import frontmatter

    from storage.text.markdown import FRONTMATTER
    from storage.text.yaml_load import AliasBombError

    post = frontmatter.loads("---\nname: A\nx_custom: {k: 1}\n---\nbody\n", handler=FRONTMATTER)
    assert post.metadata == {"name": "A", "x_custom": {"k": 1}} and post.content == "body"
    layers = ["a: &a [x, x, x, x, x, x, x, x, x]"] + [
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]" for i in range(8)]
    bomb = "---\n" + "\n".join(layers) + "\n---\nbody\n"
    with pytest.raises(AliasBombError):
        frontmatter.loads(bomb, handler=FRONTMATTER)
    assert "alias" in split_frontmatter(bomb).error
    # python-frontmatter's default fence (`^-{3,}\s*$`) eats a blank line after the block; this one keeps it
    fm = split_frontmatter("---\nname: A\nunknown: 1\n---\n\n\nbody\n")
    assert fm.meta == {"name": "A", "unknown": 1} and fm.body == "\n\nbody\n" and fm.body_line == 5
