"""The concise text an MCP tool answer gives the model (the full JSON goes along as structured content).

Reads return what the model came for (the file text, the hits with their text and neighbours, one line per
node or entry); writes and jobs one line saying what happened; anything else compact JSON.
"""

from __future__ import annotations

import json
from typing import Any

from storage.text import validity
from storage.text.facts import said
from storage.text.instructions import neutralise


def text(tool: str, result: Any) -> str:
    """The model-facing text of `tool`'s `result` (compact JSON for a shape the renderer does not expect)."""
    render = RENDERERS.get(tool)
    if render is not None:
        try:
            return render(result)
        except (KeyError, TypeError, AttributeError, ValueError):
            pass
    return compact(result)


def compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _read(r: dict) -> str:
    head = f"{r['path']} (lines {r['start_line']}-{r['end_line']} of {r['total_lines']})"
    return f"{head}\n{r['content']}" + "".join(f"{note}\n" for note in read_notes(r))


def read_notes(r: dict) -> list[str]:
    """The markers a bounded `read` answer needs: a cut line, and where to continue."""
    notes = []
    cut = r.get("cut_line")
    if cut:
        notes.append(f"[line {cut['line']} cut after {cut['shown_chars']:,} of {cut['chars']:,} characters]")
    if r.get("truncated"):
        notes.append(f"[truncated: lines {r['start_line']}-{r['end_line']} of {r['total_lines']} shown; continue "
                     f"at start_line={r['next_start_line']}]")
    return notes


def _search(hits: list[dict]) -> str:
    if not hits:
        return "no results"
    parts = []
    for hit in hits:
        when = validity.label(hit)
        where = hit.get("address") or hit["path"]  # NAME:path for another workspace's file: what read takes
        lines = [f"{where}:{hit['start_line']}-{hit['end_line']} score {hit.get('score', 0):.3f}"
                 + (f" ({when})" if when else "")
                 + (f" [{' > '.join(hit['headings'])}]" if hit.get("headings") else "")
                 + (f" flags: {', '.join(hit['flags'])}" if hit.get("flags") else "")]
        about = _about(hit)
        if about:
            lines.append(f"  {about}")
        lines.append(_quoted(hit))
        if hit.get("more"):
            lines.append("  also matches: " + ", ".join(f"L{a}-L{b}" for a, b in hit["more"]))
        workspace = where[:len(where) - len(hit["path"])]  # `NAME:` of another workspace's hit, links stay in it
        lines += [f"  from: {workspace}{item['path']}:{item['start_line']}" for item in hit.get("evidence") or []]
        if hit.get("replaced_by"):
            lines.append(f"  replaced by: {workspace}{hit['replaced_by']}")
        for nb in hit.get("neighbors") or []:
            arrow = "<-" if nb.get("direction") == "in" else "->"
            lines.append(f"  {arrow} {workspace}{nb['path']}" + (f": {_about(nb)}" if _about(nb) else ""))
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def _quoted(hit: dict) -> str:
    """A hit's text as a model may read it: a line that reads as an instruction neutralised (storage/text/instructions.py;
    the JSON keeps the text and its `flags`)."""
    if not hit.get("flags"):
        return hit.get("text") or ""
    first = hit["start_line"]
    return "\n".join(neutralise(line, f"{hit.get('address') or hit['path']}:{first + n}")[0]
                     for n, line in enumerate((hit.get("text") or "").split("\n")))


def _recall(r: dict) -> str:
    return (r["text"] + "\n\n" if r["text"] else "nothing new found\n\n") + recall_note(r)


def recall_note(r: dict) -> str:
    """The line under a recall answer: what it holds and what it left out."""
    note = f"[recall: {len(r['items'])} piece(s), {r['tokens']:,} of {r['budget']:,} tokens"
    if r.get("withheld"):
        note += f"; {r['withheld']:,} line(s) this session was already given left out"
    return note + "]"


def behind_note(report: dict) -> str:
    """The line under an answer read from an index behind the files (storage/index/freshness.py): what and what to do."""
    return f"[{report['message']}]"


def _about(row: dict) -> str:
    return ": ".join(str(x) for x in (row.get("name"), row.get("description")) if x)


def _nodes(rows: list[dict]) -> str:
    if not rows:
        return "no results"
    return "\n".join(f"{r.get('address') or r['path']} ({r.get('score', 0):.3f})" + (f" {_about(r)}" if _about(r) else "") for r in rows)


def _list(r: dict) -> str:
    lines = [f"{e['path']}{'/' if e.get('type') == 'dir' else ''}" + (f" {e['size']} B" if e.get("size") is not None
                                                                      else "") for e in r["entries"]]
    if r.get("truncated"):
        lines.append(f"[truncated: {len(r['entries'])} entries from offset {r.get('offset', 0)} shown; continue at "
                     f"offset={r.get('next_offset')}]")
    return "\n".join(lines) or "empty"


def _traverse(r: dict) -> str:
    lines = [f"{n['path']} (depth {n['depth']})" + ("" if n.get("exists", True) else " [missing]")
             + (f" {_about(n)}" if _about(n) else "") for n in r["nodes"]]
    lines += [f"{e['source']} -> {e['target']}" + (f" ({e['predicate']})" if e.get("predicate") else "")
              for e in r["edges"]]
    if r.get("truncated"):
        lines.append("... (truncated)")
    return "\n".join(lines)


def _trace(r: dict) -> str:
    return "\n".join(trace_lines(r))


def trace_lines(r: dict) -> list[str]:
    """A trace answer as an indented tree, one line per step (its text's further lines indented under it), then
    what was cut or broken."""
    lines: list[str] = []

    def walk(step: dict, depth: int) -> None:
        first, *rest = _step_text(step).split("\n")
        pad = "  " * depth
        lines.append(pad + ("└ " if depth else "") + first)
        lines.extend(pad + ("  " if depth else "") + "  " + more for more in rest)
        for child in step.get("sources") or []:
            walk(child, depth + 1)

    walk(r["chain"], 0)
    if r.get("truncated"):
        lines.append(f"[truncated after {r['steps']} steps: the chain goes on]")
    if r.get("problems"):
        lines.append(f"[{len(r['problems'])} link(s) lead nowhere: see the steps marked BROKEN]")
    return lines


def _step_text(step: dict) -> str:
    """One trace step: where it is, when, and its text."""
    where = step["path"] + (f"#{step['anchor']}" if step.get("anchor") else "")
    kind = step["type"]
    if kind == "fact":
        when = (validity.label({"status": step.get("status"), "valid_from": step.get("since"),
                                "valid_to": step.get("until")}) if step.get("status") else step.get("date"))
        return f"{where} ({step['kind']}{', ' + when if when else ''}): {said(step['text'])}"
    if kind == "record":
        return f"{where} {step.get('created_at') or '(no time)'} {step.get('role') or '?'}: {step.get('text')}"
    if kind in ("line", "lines"):
        return f"{where}: {step.get('text')}"
    if kind == "broken":
        return f"{where}: BROKEN: {step['problem']}"
    return f"{where} (the whole file)"


def _days(r: dict) -> str:
    if "days" not in r:  # one day: its cards
        head = f"{r['date']}: {len(r['cards'])} card(s)" + (", index page" if r.get("index_page") else "")
        return "\n".join([head] + [f"  {c.get('path')}" + (f" {_about(c)}" if _about(c) else "") for c in r["cards"]])
    lines = [f"{d['date']}: {d['cards']} card(s)" + (", index page" if d.get("index_page") else "") for d in r["days"]]
    return "\n".join(lines) or "no days"


def _turn(r: dict) -> str:
    line = (f"recorded {r['appended']} message(s) in session {r['session_id']} (turn {r['turns']}, "
            f"{r['pending']} waiting; auto_memory every {r['every']})")
    if r.get("launched"):
        line += f"; auto_memory run started: {r['launched']} (ask job_status)"
    for key in ("waiting", "launch_error"):
        if r.get(key):
            line += f"; {r[key]}"
    return line


def _run(r: dict) -> str:
    line = f"run {r['id']} ({r.get('name')}, {r.get('deployment')}) started: {r.get('state')}; ask job_status"
    return line + (f"\n{r['ui_url']}" if r.get("ui_url") else "")


def _status(r: dict) -> str:
    line = f"run {r['id']} ({r.get('deployment')}): {r.get('state')}"
    if r.get("message"):
        line += f": {r['message']}"
    summary = r.get("summary")
    if summary:  # a report's text, or the flow's result
        line += "\n" + (summary if isinstance(summary, str) else compact(summary))
    if r.get("ui_url"):
        line += f"\n{r['ui_url']}"
    return line


# the field a tool's text block carries in full: left out of its structured content
AS_TEXT = {"read": "content", "recall": "text"}


def structured(tool: str, result: Any) -> Any:
    """The result as structured content: without the field the text block already carries (one copy of a
    page of text, not two)."""
    field = AS_TEXT.get(tool)
    if field and isinstance(result, dict) and field in result:
        return {k: v for k, v in result.items() if k != field}
    return result


RENDERERS = {
    "read": _read, "search": _search, "recall": _recall, "node_search": _nodes, "list": _list, "traverse": _traverse,
    "trace": _trace, "daily_list": _days, "turn": _turn, "dream": _run, "auto_memory": _run, "job_status": _status,
}
