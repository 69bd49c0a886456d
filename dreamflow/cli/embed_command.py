"""`dreamflow embed`: fill missing vectors by hand with a progress bar; `--status` only counts (no model load)."""
from __future__ import annotations

import json
import sys

import click

from engine.config.settings import Settings
from engine.models.semantic import status


@click.command("embed")
@click.option("--status", "show_status", is_flag=True, help="Only count chunks with and without vectors.")
@click.option("--batch", default=32, show_default=True, help="Chunk texts per model call.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def embed(obj, show_status: bool, batch: int, as_json: bool) -> None:
    """Embed chunks that lack vectors (semantic recall), with a progress bar; --status just counts.

    The running service does this in the background after every change; use this without the service,
    after switching DREAMFLOW_EMBEDDER, or to see how far vectors lag the keyword index.
    """
    from engine.access.client import open_memory, service_for
    from engine.models.embedders import EmbedderError, make_embedder
    from storage.index import vectors as _vectors

    remote = service_for(obj.workspace)
    if remote is not None:
        info = remote.status().get("vectors")
        message = "the running service owns the index and embeds new chunks in the background"
        _print(info or {"service": message}, as_json, message if info is None else None)
        return
    memory = open_memory(obj.workspace)
    settings = Settings()
    if show_status:
        _print(status(memory, settings), as_json)
        return
    try:
        embedder = make_embedder(settings)
        if embedder is None:
            raise EmbedderError("vectors are off (DREAMFLOW_EMBEDDER=none)")
        result = _run_backfill(memory, embedder, batch, quiet=as_json)
    except EmbedderError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(6)
    with memory.db.session() as con:
        result["pruned"] = _vectors.prune(con)
    _print(result, as_json)


def _print(data: dict, as_json: bool, note: str | None = None) -> None:
    if as_json:
        click.echo(json.dumps(data, ensure_ascii=False))
        return
    if note:
        click.echo(note)
        return
    for key, value in data.items():
        click.echo(f"{key:>10}: {value}")



def _run_backfill(memory, embedder, batch: int, quiet: bool) -> dict:
    """`storage.index.vectors.backfill` under a rich progress bar (none when `quiet`)."""
    from storage.index import vectors as _vectors

    if quiet:
        return _vectors.backfill(memory.db, embedder, batch=batch)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (TextColumn("embedding"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, transient=True) as bar:
        task = bar.add_task("embed", total=None)
        return _vectors.backfill(memory.db, embedder, batch=batch,
                                 progress=lambda done, total: bar.update(task, completed=done, total=total))
