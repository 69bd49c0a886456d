"""Property tests (hypothesis): whatever bytes a file holds and whatever a query says, parsing, indexing and
search answer without raising, and what they report points inside the file."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage.errors import InvalidInput
from storage.index.chunking import MAX_CHARS
from storage.memory import Memory
from storage.text.markdown import headings, parse_file

# Markdown and YAML fragments that open, close or confuse blocks, glued in random order with random text.
FRAGMENTS = ["# ", "## ", "---\n", "```\n", "```python\n", "~~~\n", "- ", "1. ", "> ", "| a | b |\n", "|---|---|\n",
             "[[", "]]", "[[a.md#L1-L2]]", "[[b.md#Setup]]", "uses:: ", "\n", "\n\n", "    ", "\t", "<div>", "</div>",
             "name: x\n", "description: [\n", "word ", "long" * 400, "中文", "é", "\r\n", "`", "***\n", "\\|", "|",
             "![[x.png]]", "date: 2024-13-45\n", ":", "\x00"]
TEXTS = st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=20), max_size=60).map("".join)
PATHS = st.sampled_from(["digest/wiki/a.md", "daily/2024-01-02/b.md", "session/dialog/s.jsonl", "resource/r.txt"])
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))


@SETTINGS
@given(TEXTS, PATHS)
def test_any_text_parses_into_chunks_and_links_inside_the_file(text, path):
    data = text.encode("utf-8", "replace")
    parsed = parse_file(path, data)
    last = max(parsed.line_count, 1)
    for chunk in parsed.chunks:
        assert 1 <= chunk.start_line <= chunk.end_line <= last, (chunk, parsed.line_count)
        assert chunk.text.strip() and len(chunk.text) <= 2 * MAX_CHARS
    for link in parsed.links:
        assert 1 <= link.line <= last and link.target
    if path.endswith(".md"):
        assert all(isinstance(h, str) for h in headings(text))


@SETTINGS
@given(st.binary(max_size=400), PATHS)
def test_any_bytes_parse_without_raising(data, path):
    parsed = parse_file(path, data)
    assert parsed.kind in ("markdown", "jsonl", "text", "binary")


@pytest.fixture(scope="module")
def memory(tmp_path_factory):
    m = Memory(tmp_path_factory.mktemp("ws"))
    m.write("digest/wiki/a.md", "Alpha beta 'quoted' \\ back [[digest/wiki/b.md]] 中文 café", name="A", metadata={"tags": ["x"]})
    m.write("digest/wiki/b.md", "Gamma; DROP TABLE chunks; --", name="B")
    return m


@settings(SETTINGS, max_examples=100)  # each example runs two searches on a real index
@given(query=st.text(max_size=40), tags=st.lists(st.text(max_size=8), max_size=3), prefix=st.text(max_size=10))
def test_any_query_and_filters_search_without_raising(memory, query, tags, prefix):
    if not query.strip():  # an empty query is a usage error, never a search
        with pytest.raises(InvalidInput):
            memory.search(query)
        return
    hits = memory.search(query, tags=tags or None, path_prefix=prefix or None, limit=5)
    assert all(h["path"] in ("digest/wiki/a.md", "digest/wiki/b.md") for h in hits)
    memory.node_search(query)
    assert memory.search("gamma")[0]["path"] == "digest/wiki/b.md"  # nothing a query said changed the index
