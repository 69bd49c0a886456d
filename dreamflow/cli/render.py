"""Output for people: rich tables and text per operation result, progress bars and error lines.

The CLI imports this module only when it prints for a person (not with --json; search hits: dreamflow/cli/plain.py).
User text is always passed as
`rich.text.Text`, never as markup, so `[[wikilinks]]` and brackets print literally.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from storage.text import validity

out = Console(highlight=False, soft_wrap=True)  # long lines are not cut: grep and copy keep working
err = Console(stderr=True, highlight=False)


def show(op_name: str, result: Any) -> None:
    """Print one operation's result the way a person wants to read it."""
    RENDERERS.get(op_name, show_any)(result)


def counted(n: int, noun: str) -> str:
    """`1 card`, `2 cards`: a count with its noun (nouns taking `s` only)."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def error(message: str) -> None:
    err.print(Text("Error: ", style="bold red") + Text(message))


@contextmanager
def progress(label: str) -> Iterator[Callable[[int, int], None]]:
    """A progress bar on stderr; yields the `progress(done, total)` callback Memory methods accept."""
    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   console=err, transient=False)
    task = bar.add_task(label, total=None)
    with bar:
        yield lambda done, total: bar.update(task, completed=done, total=total)


# ---- per-operation renderers ---------------------------------------------------------------------------

def show_node_search(rows: list[dict]) -> None:
    table = _table("path", "name", "description", "valid", "score")
    for row in rows:
        table.add_row(Text(row.get("address") or row["path"], style="cyan"), Text(row.get("name") or ""),
                      Text(row.get("description") or ""), validity.label(row) or "", f"{row.get('score', 0):.4f}")
    out.print(table if rows else Text("no results", style="dim"))


def show_read(result: dict) -> None:
    from dreamflow.mcp.text import read_notes

    sys.stdout.write(result["content"])
    notes = read_notes(result)
    if notes:
        for note in notes:
            err.print(Text(note.replace("start_line=", "--start-line "), style="dim"))
    elif result["end_line"] < result["total_lines"] or result["start_line"] > 1:
        err.print(Text(f"lines {result['start_line']}-{result['end_line']} of {result['total_lines']}",
                       style="dim"))


def show_recall(result: dict) -> None:
    from dreamflow.mcp.text import recall_note

    if result["text"]:
        out.print(Text(result["text"]))
    else:
        out.print(Text("nothing new found", style="dim"))
    err.print(Text(recall_note(result), style="dim"))


def show_trace(result: dict) -> None:
    from dreamflow.mcp.text import trace_lines

    for line in trace_lines(result):
        style = "yellow" if ": BROKEN: " in line or line.startswith("[") else None
        out.print(Text(line, style=style) if style else Text(line))


def show_list(result: dict) -> None:
    table = _table("path", "size", "modified")
    for entry in result["entries"]:
        style = "bold blue" if entry["type"] == "folder" else "cyan"
        table.add_row(Text(entry["path"], style=style), _size(entry.get("size")), entry.get("mtime", ""))
    out.print(table if result["entries"] else Text("no files", style="dim"))
    if result["truncated"]:
        err.print(Text(f"(more files: continue with --offset {result.get('next_offset')})", style="dim"))
    for entry in result.get("skipped", []):
        err.print(Text(f"skipped {entry['path']}: {entry['kind']} (never opened)", style="yellow"))


def show_stat(result: dict) -> None:
    facts = {k: v for k, v in result.items() if k not in ("links_out", "links_in")}
    facts["size"] = _size(result["size"])
    show_any(facts)
    if result.get("type") == "dir":
        return
    for title, links, key in (("links out", result["links_out"], "target"), ("links in", result["links_in"], "source")):
        out.print(Text(f"{title} ({len(links)})", style="bold"))
        for link in links:
            anchor = f"#{link['anchor']}" if link.get("anchor") else ""
            pred = f"{link['predicate']}:: " if link.get("predicate") else ""
            out.print(Text(f"  line {link.get('line')}: {pred}") + Text(f"{link[key]}{anchor}", style="green"))


def show_frontmatter(result: dict) -> None:
    import yaml

    if result.get("error"):
        error(f"malformed frontmatter in {result['path']}: {result['error']}")
    meta = result["frontmatter"]
    text = yaml.safe_dump(meta, allow_unicode=True, sort_keys=False) if meta else "(no frontmatter)\n"
    sys.stdout.write(text)


def show_tags(rows: list[dict]) -> None:
    table = _table("tag", "files", "first", "last")
    for row in rows:
        table.add_row(Text(row["tag"], style="magenta"), str(row["files"]), row["first_date"] or "",
                      row["last_date"] or "")
    out.print(table if rows else Text("no tags", style="dim"))
    for row in rows:
        if "paths" in row:
            _cards(row["paths"])


def show_daily_list(result: dict) -> None:
    if "cards" in result:
        out.print(Text(result["date"], style="bold"))
        _cards(result["cards"])
        return
    table = _table("date", "cards", "index page")
    for day in result["days"]:
        table.add_row(day["date"], str(day["cards"]), "yes" if day["index_page"] else "no")
    out.print(table if result["days"] else Text("no days yet", style="dim"))


def show_traverse(result: dict) -> None:
    _cards(result.get("nodes", []))
    for edge in result.get("edges", []):
        pred = f" ({edge['predicate']})" if edge.get("predicate") else ""
        anchor = f"#{edge['anchor']}" if edge.get("anchor") else ""
        out.print(Text(f"{edge.get('source')} → {edge.get('target')}{anchor}{pred}"))


def show_change(result: dict) -> None:
    """write/create/edit/append/prepend/frontmatter_*/upload/download: one confirmation line."""
    facts = ", ".join(f"{k} {_plain(v)}" for k, v in result.items()
                      if k in ("lines", "replacements", "bytes", "deleted", "missing") and v not in ([], None))
    verb = "created" if result.get("created") else "updated"
    line = Text(f"{verb} ") + Text(result["path"], style="cyan")
    if result.get("dest"):
        line = Text("copied ") + Text(result["path"], style="cyan") + Text(f" to {result['dest']}")
    elif result.get("source"):
        line = Text("uploaded ") + Text(result["path"], style="cyan")
    out.print(line + Text(f" ({facts})" if facts else "", style="dim"))
    if result.get("note"):
        out.print(Text(result["note"], style="dim"))


def show_delete(result: dict) -> None:
    files = f" ({len(result['files'])} files)" if result.get("type") == "dir" else ""
    out.print(Text("deleted ") + Text(result["path"], style="cyan") + Text(files))
    if result["inbound"]:
        err.print(Text(f"warning: {counted(len(result['inbound']), 'link')} still point to it:", style="yellow"))
        for link in result["inbound"]:
            target = f" → {link['target']}" if "target" in link else ""
            err.print(Text(f"  {link['source']}:{link.get('line')}{target}"))


def show_move(result: dict) -> None:
    out.print(Text("moved ") + Text(result["from"], style="cyan") + Text(" → ") + Text(result["to"], style="cyan"))
    for rewritten in result["rewritten"]:
        out.print(Text(f"  rewrote {counted(rewritten['links'], 'link')} in ") + Text(rewritten["path"], style="green"))


def show_daily_reindex(result: dict) -> None:
    if result.get("changed", True):
        verb = "created " if result.get("created") else "wrote "
        out.print(Text(verb) + Text(result["path"], style="cyan") + Text(f" ({counted(len(result['cards']), 'card')})"))
    elif result["cards"]:
        out.print(Text(result["path"], style="cyan") + Text(f" is up to date ({counted(len(result['cards']), 'card')})"))
    else:
        out.print(Text(f"no cards on {result['date']}: no page written"))


def show_index_stats(result: dict) -> None:
    """The counts in plain words; the keyword index's internals as one line saying what compaction will do
    (`--json` has every count under its key)."""
    from storage.index.indexer import EXPLAINED

    table = _table("", "", header=False)
    for key in ("files", "chunks", "links"):
        table.add_row(Text(EXPLAINED[key][0].capitalize(), style="bold"), Text(f"{result[key]:,}"))
    if result.get("files_with_errors"):
        table.add_row(Text("Files with errors", style="bold"),
                      Text(f"{result['files_with_errors']:,} (`dreamflow doctor` names them)", style="yellow"))
    for key, label in (("by_bucket", "By folder"), ("by_kind", "By kind")):
        table.add_row(Text(label, style="bold"), Text(", ".join(f"{k} {v:,}" for k, v in result[key].items())))
    stale, unsorted = result.get("stale_chunks", 0), result.get("unsorted_postings", 0)
    waiting = " and ".join(part for part in (
        stale and f"{counted(stale, 'replaced passage')} to drop",
        unsorted and f"{unsorted:,} new word {'entry' if unsorted == 1 else 'entries'} to sort") if part)
    table.add_row(Text("Upkeep", style="bold"), Text(
        f"{waiting}: done at the next compaction (`dreamflow optimize` does it now)" if waiting
        else "nothing waiting: the index is compact", style="dim"))
    out.print(table)


def show_any(result: Any) -> None:
    """Fallback: a key/value table for dicts, a table for lists of dicts, JSON otherwise."""
    if isinstance(result, dict):
        table = _table("", "", header=False)
        for key, value in result.items():
            table.add_row(Text(str(key), style="bold"), Text(_plain(value)))
        out.print(table)
    elif isinstance(result, list) and result and all(isinstance(r, dict) for r in result):
        cols = list(dict.fromkeys(k for r in result for k in r))
        table = _table(*cols)
        for row in result:
            table.add_row(*(Text(_plain(row.get(c))) for c in cols))
        out.print(table)
    else:
        out.print(Text(_plain(result)))


RENDERERS: dict[str, Callable[[Any], None]] = {
    "node_search": show_node_search,
    "recall": show_recall,
    "read": show_read,
    "list": show_list,
    "stat": show_stat,
    "frontmatter_get": show_frontmatter,
    "tags": show_tags,
    "daily_list": show_daily_list,
    "daily_reindex": show_daily_reindex,
    "traverse": show_traverse,
    "index_stats": show_index_stats,
    "trace": show_trace,
    "delete": show_delete,
    "move": show_move,
    **{name: show_change for name in ("write", "create", "edit", "append", "prepend", "frontmatter_update",
                                      "frontmatter_delete_keys", "upload", "download")},
}


# ---- helpers -------------------------------------------------------------------------------------------

def _table(*columns: str, header: bool = True) -> Table:
    table = Table(box=box.SIMPLE_HEAD if header else None, show_header=header, show_edge=False, pad_edge=False)
    for col in columns:
        table.add_column(col, overflow="fold")
    return table


def _cards(rows: list[dict]) -> None:
    table = _table("path", "name", "description")
    for row in rows:
        table.add_row(Text(row.get("path", ""), style="cyan"), Text(row.get("name") or ""),
                      Text(row.get("description") or ""))
    out.print(table if rows else Text("nothing", style="dim"))


def _plain(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, (list, tuple)):
        return ", ".join(_plain(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k}={_plain(v)}" for k, v in value.items())
    return str(value)


def _size(n: int | None) -> str:
    if n is None:
        return ""
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)
