"""Semantic recall for a process: which vector index a `Memory` searches with, the background filler, and the
`dreamflow embed` command.

Decision (fast start): torch takes ~6 s to import, the CLI must answer in a fraction of a second. So
- the long-running service (`attach(memory, long_running=True)`) searches with vectors, loads the model once
  on the first query that has vectors to search, and fills missing vectors on a background thread;
- CLI commands and flow runs go through that service when it runs, so they get hybrid results too;
- an in-process memory without the service searches keyword-only unless `DREAMFLOW_CLI_VECTORS=1` (then the
  model loads lazily, only when stored vectors exist for it);
- `dreamflow embed` fills missing vectors by hand (progress bar); `--status` only counts, never loads a model.
"""

from __future__ import annotations

import logging

from dreamflow.settings import Settings

# numpy, the embedders and storage.vectors are imported inside the functions: registering `dreamflow embed`
# must not slow down every other command.

log = logging.getLogger(__name__)


def vector_index(settings: Settings | None = None):
    """A lazy `storage.vectors.VectorIndex` for the configured embedder; None when vectors are off or
    misconfigured. Nothing heavy loads until a query meets stored vectors of this model."""
    from dreamflow.embedders import EmbedderError, make_embedder
    from storage import vectors as _vectors

    settings = settings or Settings()
    try:
        embedder = make_embedder(settings)
    except EmbedderError as exc:
        log.warning("vector search off: %s", exc)
        return None
    if embedder is None:
        return None
    return _vectors.VectorIndex(embedder.model_id, lambda query: embedder.embed([query])[0],
                                weight=settings.vector_weight, rrf_k=settings.vector_rrf_k, embedder=embedder)


def attach(memory, long_running: bool = False, settings: Settings | None = None):
    """Give an in-process `Memory` vector search when this process should have it (see the module docstring).

    With `long_running`, also start and return the background `storage.vectors.Backfiller` (call its `stop()`
    on shutdown); else None.
    """
    settings = settings or Settings()
    if not (long_running or settings.cli_vectors):
        return None
    index = vector_index(settings)
    if index is None:
        return None
    memory.vectors = index
    if not long_running:
        return None
    from storage.vectors import Backfiller

    return Backfiller(memory.db, index.embedder, index=index).start()


def status(memory, settings: Settings | None = None) -> dict:
    """Vector coverage of the index: {chunks, texts, embedded, pending, pieces, model, dim, configured}."""
    from dreamflow.embedders import EmbedderError, make_embedder
    from storage import vectors as _vectors

    settings = settings or Settings()
    try:
        embedder = make_embedder(settings)
    except EmbedderError:
        embedder = None
    configured = embedder.model_id if embedder else None
    with memory.db.session() as con:
        result = _vectors.status(con, model_id=configured)
    result["configured"] = configured
    return result


def register(cli) -> None:
    """Add `dreamflow embed` to the command group."""
    import json
    import sys

    import click

    @cli.command("embed")
    @click.option("--status", "show_status", is_flag=True, help="Only count chunks with and without vectors.")
    @click.option("--batch", default=32, show_default=True, help="Chunk texts per model call.")
    @click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
    @click.pass_obj
    def embed_command(obj, show_status: bool, batch: int, as_json: bool) -> None:
        """Embed chunks that lack vectors (semantic recall), with a progress bar; --status just counts.

        The running service does this in the background after every change; use this without the service,
        after switching DREAMFLOW_EMBEDDER, or to see how far vectors lag the keyword index.
        """
        from dreamflow.client import connect, local_memory
        from dreamflow.embedders import EmbedderError, make_embedder
        from storage import vectors as _vectors

        remote = connect(obj.workspace)
        if remote is not None:
            info = remote.status().get("vectors")
            message = "the running service owns the index and embeds new chunks in the background"
            _print(info or {"service": message}, as_json, message if info is None else None)
            return
        memory = local_memory(obj.workspace)
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
    """`storage.vectors.backfill` under a rich progress bar (none when `quiet`)."""
    from storage import vectors as _vectors

    if quiet:
        return _vectors.backfill(memory.db, embedder, batch=batch)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (TextColumn("embedding"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, transient=True) as bar:
        task = bar.add_task("embed", total=None)
        return _vectors.backfill(memory.db, embedder, batch=batch,
                                 progress=lambda done, total: bar.update(task, completed=done, total=total))
