"""Hostile YAML never hangs or hides a note: an alias bomb (~400 bytes, 9^9 values once expanded) or a
recursive anchor is reported as malformed frontmatter and the file is still indexed as text; a value YAML
cannot construct (`date: 2024-13-45`) is kept as text and reported, the other keys stay.

The CLI runs under an address-space limit, so a regression fails with MemoryError instead of eating the
machine's memory."""

import json
import os
import resource
import subprocess
import sys

import pytest

from storage.errors import InvalidInput
from storage.memory import Memory
from storage.text.markdown import parse_file, split_frontmatter
from storage.text.yaml_load import ALIAS_BUDGET, AliasBombError, load


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    """YAML of `levels` anchors, each a list of `width` aliases of the one before: width**levels values."""
    names = "abcdefghijklmnop"
    lines = [f"a: &a [{', '.join(['lol'] * width)}]"]
    for i in range(1, levels):
        lines.append(f"{names[i]}: &{names[i]} [{', '.join(['*' + names[i - 1]] * width)}]")
    return "\n".join(lines) + "\n"


BOMB_NOTE = f"---\nname: Bomb\ndescription: nine levels\n{alias_bomb()}---\n# Body\n\nthe quokka survives the bomb\n"


def test_the_bomb_is_small():
    assert len(alias_bomb()) < 400


def test_an_alias_bomb_is_malformed_frontmatter_and_the_note_is_still_text():
    fm = split_frontmatter(BOMB_NOTE)
    assert fm.meta == {} and "malformed frontmatter" in fm.error and "alias" in fm.error
    assert fm.body == BOMB_NOTE  # nothing dropped when the note is re-rendered

    parsed = parse_file("digest/wiki/bomb.md", BOMB_NOTE.encode())
    assert parsed.frontmatter == {} and parsed.name is None
    assert len(parsed.errors) == 1 and parsed.errors[0].startswith("malformed frontmatter")
    text = "\n".join(c.text for c in parsed.chunks)
    assert "the quokka survives the bomb" in text and "b: &b" in text  # the YAML lines stay searchable


def merge_bomb(levels: int = 8) -> str:
    """Mappings merging 9 copies of the one before (`<<: [*m0, *m0, ...]`): merge keys count like aliases."""
    lines = ["m0: &m0 {x: [1, 2, 3]}"]
    for i in range(1, levels):
        lines.append(f"m{i}: &m{i} {{<<: [{', '.join([f'*m{i - 1}'] * 9)}], y{i}: {i}}}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("yaml_text", [
    "a: &a [1, *a]\n",  # a list that contains itself
    "a: &a {k: *a}\n",  # a mapping that contains itself
    merge_bomb(),
])
def test_recursive_and_merge_aliases_are_refused(yaml_text):
    with pytest.raises(AliasBombError):
        load(yaml_text)


def test_deep_nesting_is_malformed_frontmatter_not_a_crash():
    deep = "---\nname: deep\nx: " + "[" * 20000 + "]" * 20000 + "\n---\nbody\n"
    fm = split_frontmatter(deep)
    assert fm.meta == {} and fm.error.startswith("malformed frontmatter")
    assert parse_file("digest/wiki/deep.md", deep.encode()).errors[0].startswith("malformed frontmatter")


def test_ordinary_aliases_within_the_budget_load():
    data, problems = load("defaults: &d {lang: en, tags: [a, b]}\nthis: *d\nthat: [*d, *d]\n")
    assert data["this"] == data["defaults"] == {"lang": "en", "tags": ["a", "b"]} and problems == []
    def wide(copies):  # each alias of `a` adds its 101 values (the list and its items)
        return "a: &a [" + ", ".join(["x"] * 100) + "]\nb: [" + ", ".join(["*a"] * copies) + "]\n"

    fits = ALIAS_BUDGET // 101
    assert len(load(wide(fits))[0]["b"]) == fits
    with pytest.raises(AliasBombError):
        load(wide(fits + 1))


def test_a_bad_value_keeps_the_other_keys_and_is_reported():
    text = "---\nname: Trip\ndescription: the Lisbon trip\ndate: 2024-13-45\ntags: [travel]\n---\nbody\n"
    fm = split_frontmatter(text)
    assert fm.error is None and fm.meta == {"name": "Trip", "description": "the Lisbon trip",
                                            "date": "2024-13-45", "tags": ["travel"]}
    assert fm.value_errors == ["malformed frontmatter value: '2024-13-45' at line 4 is not a valid date "
                               "(month must be in 1..12); kept as text"]
    parsed = parse_file("digest/wiki/trip.md", text.encode())
    assert (parsed.name, parsed.description, parsed.tags) == ("Trip", "the Lisbon trip", ["travel"])
    assert parsed.date is None and parsed.frontmatter["date"] == "2024-13-45"
    assert parsed.errors == fm.value_errors  # reported once
    quoted = parse_file("digest/wiki/trip.md", text.replace("2024-13-45", "'2024-13-45'").encode())
    assert quoted.name == "Trip" and quoted.errors == [
        "malformed frontmatter value: date '2024-13-45' is not a YYYY-MM-DD date; not used as the note's date"]
    huge = load("n: " + "9" * 5000 + "\n")
    assert huge[0]["n"] == "9" * 5000 and "is not a valid int" in huge[1][0] and len(huge[1][0]) < 300


def test_memory_reads_and_edits_a_note_with_a_bad_value(ws):
    ws.write_text("digest/wiki/trip.md", "---\nname: Trip\ndate: 2024-13-45\n---\nbody\n")
    memory = Memory(ws.root)
    assert memory.frontmatter_get("digest/wiki/trip.md")["frontmatter"] == {"name": "Trip", "date": "2024-13-45"}
    memory.frontmatter_update("digest/wiki/trip.md", {"status": "done"})
    assert memory.frontmatter_get("digest/wiki/trip.md")["frontmatter"] == {
        "name": "Trip", "date": "2024-13-45", "status": "done"}
    stat = memory.stat("digest/wiki/trip.md")  # rewritten as a quoted string: still reported
    assert stat["name"] == "Trip" and any(e.startswith("malformed frontmatter value") for e in stat["errors"])


def test_an_alias_bomb_in_interests_yaml_is_a_clear_error(ws):
    from engine.memory.interests import load as load_interests

    ws.write_text("daily/2024-05-08/interests.yaml", "topics: &t [x]\n" + alias_bomb().replace("a: &a", "z: &a"))
    with pytest.raises(InvalidInput, match="not readable YAML"):
        load_interests(Memory(ws.root), "2024-05-08")


def _limited_memory():
    limit = 3 << 30  # 3 GB of address space: the CLI needs a few hundred MB, the bomb many GB
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def dreamflow(ws, *args):
    env = {k: v for k, v in os.environ.items() if k != "DREAMFLOW_WORKSPACE"}
    proc = subprocess.run([sys.executable, "-m", "dreamflow", "--workspace", str(ws), *args, "--json"],
                          capture_output=True, text=True, env=env, timeout=90, preexec_fn=_limited_memory)
    return proc


@pytest.mark.e2e
@pytest.mark.timeout(120)
def test_reindex_search_and_doctor_get_through_a_bomb(ws):
    ws.write_text("digest/wiki/bomb.md", BOMB_NOTE)
    ws.write_text("digest/wiki/trip.md", "---\nname: Trip\ndescription: quokka island\ndate: 2024-13-45\n---\nx\n")
    proc = dreamflow(ws.root, "reindex")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(dreamflow(ws.root, "index-stats").stdout)["files_with_errors"] == 2
    proc = dreamflow(ws.root, "search", "quokka")
    assert proc.returncode == 0, proc.stderr
    hits = {hit["path"] for hit in json.loads(proc.stdout)}
    assert hits == {"digest/wiki/bomb.md", "digest/wiki/trip.md"}
    proc = dreamflow(ws.root, "stat", "digest/wiki/trip.md")
    assert json.loads(proc.stdout)["name"] == "Trip"
    proc = dreamflow(ws.root, "doctor")
    bad = {entry["path"]: entry["error"] for entry in json.loads(proc.stdout)["bad_frontmatter"]}
    assert "alias" in bad["digest/wiki/bomb.md"] and "2024-13-45" in bad["digest/wiki/trip.md"]
