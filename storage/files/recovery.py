"""Finishing what a killed process left half done: the intent journal's entries (storage/files/journal.py) replayed
under the index lock, and what cannot be replayed set aside with the graph repaired from the files.
"""

from __future__ import annotations

import logging

import duckdb

from storage.files import journal, retraction
from storage.files.workspace import Workspace, special_kind
from storage.index import doctor
from storage.index.db import is_damage
from storage.text import graph_edit

log = logging.getLogger(__name__)


def recover(con: duckdb.DuckDBPyConnection, ws: Workspace) -> dict:
    """Finish (or drop) every journaled operation a dead process left. Call under the index lock, so no
    entry belongs to an operation still running. Returns {operations: [{kind, ..., outcome}], and
    graph_repaired (see `doctor.repair`) when some entry was set aside}.

    An entry that cannot be replayed (damaged, invalid, or failing `journal.MAX_ATTEMPTS` times) is set aside
    (`journal.quarantine`) and the graph is repaired from the files instead: links to a path that no longer
    exists are retargeted where the files tell its new place (by content hash, or the destination still
    legible in the entry). One warning line says what was set aside and what the repair did.
    """
    done, aside = [], []
    for entry in journal.entries(ws):
        row, problem = _recover_entry(con, ws, entry)
        done.append(row)
        if problem:
            aside.append((entry, row, problem))
    if not aside:
        return {"operations": done}
    return {"operations": done, "graph_repaired": _set_aside(con, ws, aside)}


def _set_aside(con: duckdb.DuckDBPyConnection, ws: Workspace, aside: list) -> dict | None:
    """Repair the graph from the files, with the moves the entries still tell, then quarantine the entries
    and say both in one line; returns what `doctor.repair` did (None when it failed)."""
    known = {}
    for _, row, _ in aside:
        old, new = row.get("src", row.get("target")), row.get("dst", row.get("new_target"))
        if isinstance(old, str) and isinstance(new, str):
            known[old] = new
    try:
        repaired = doctor.repair(con, ws, known)
        did = _repair_summary(repaired)
    except Exception as exc:  # a full disk: said once, `doctor --fix` does it later
        if is_damage(exc):
            raise  # the session sets the index aside and rebuilds it; recovery then runs again
        repaired, did = None, f"not repaired ({type(exc).__name__}: {exc}); run `dreamflow doctor --fix`"
    said = []
    for entry, row, problem in aside:
        try:
            kept = journal.quarantine(ws, entry)
            row["outcome"] = f"set aside in {kept} ({problem}); the graph from the files: {did}"
        except OSError as exc:
            problem += f"; could not be set aside: {exc.strerror or exc}"
            row["outcome"] = f"kept ({problem}); the graph from the files: {did}"
        said.append(f"{entry.name} ({problem})")
    log.warning("journal %s %s set aside in %s/; the graph from the files: %s",
                "entries" if len(said) > 1 else "entry", ", ".join(said), journal.QUARANTINE, did)
    return repaired


def _repair_summary(repaired: dict) -> str:
    """`doctor.repair`'s retargeting in a few words."""
    moved = repaired["retargeted"]
    if not moved:
        return "no link to a missing file could be placed (`dreamflow doctor` lists what is broken)"
    links = sum(r["links"] for m in moved for r in m["rewritten"])
    files = len({r["path"] for m in moved for r in m["rewritten"]})
    return (f"retargeted {links} link{'s' * (links != 1)} in {files} file{'s' * (files != 1)} ("
            + ", ".join(f"{m['from']} -> {m['to']}" for m in moved) + ")")


def _recover_entry(con: duckdb.DuckDBPyConnection, ws: Workspace, entry) -> tuple[dict, str | None]:
    """Replay one entry: ({kind, paths..., outcome}, None), or (its legible fields, why it is set aside)."""
    try:
        plan = journal.load(entry)
    except journal.Damaged as exc:
        return dict(exc.legible), f"damaged: {exc.reason}"
    row = {k: v for k, v in plan.items() if k in journal.LEGIBLE}
    problem = journal.invalid(plan)
    if problem:
        return row, f"invalid: {problem}"
    try:
        row["outcome"] = _finish_entry(con, ws, plan)
    except (OSError, duckdb.Error) as exc:  # e.g. a full disk: kept for the next run, never stops this one
        if is_damage(exc):
            raise  # the session sets the index aside and rebuilds it; recovery then runs again
        attempts = journal.failed_attempt(ws, entry, plan)
        if attempts >= journal.MAX_ATTEMPTS:
            return row, f"not finished after {attempts} attempts: {type(exc).__name__}: {exc}"
        log.warning("could not finish journal entry %s: %s", entry.name, exc)
        row["outcome"] = f"not finished ({type(exc).__name__}: {exc}); tried again by the next command"
        return row, None
    except Exception as exc:  # a plan this code cannot carry out: retrying changes nothing
        return row, f"cannot be replayed: {type(exc).__name__}: {exc}"
    journal.finish(entry)
    return row, None


def _finish_entry(con: duckdb.DuckDBPyConnection, ws: Workspace, plan: dict) -> str:
    if plan["kind"] == "move":
        src, dst = plan["src"], plan["dst"]
        if special_kind(ws.root / dst) == "missing" and special_kind(ws.root / src) is None:
            return "rolled back (the file was not moved yet)"
        return f"replayed ({len(graph_edit.replay_move(con, ws, plan))} files rewritten)"
    if plan["kind"] == "retract":
        return f"replayed ({len(retraction.replay(con, ws, plan))} files rewritten)"
    return f"replayed ({len(graph_edit.replay_relink(con, ws, plan))} files rewritten)"
