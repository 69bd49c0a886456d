"""Semantic recall for a process: which vector index a `Memory` searches with and the background filler
(the `dreamflow embed` command is dreamflow/cli/embed_command.py).

Decision (fast start): torch takes ~6 s to import, the CLI must answer in a fraction of a second. So
- the long-running service (`attach(memory, long_running=True)`) searches with vectors, loads the model on
  its model thread as it starts (in the background: the first prompt's hook, which waits 3 s, would otherwise
  spend them loading it) and fills missing vectors on a background thread;
- CLI commands and flow runs go through that service when it runs, so they get hybrid results too;
- an in-process memory without the service searches keyword-only unless `DREAMFLOW_CLI_VECTORS=1` (then the
  model loads lazily, only when stored vectors exist for it);
- `dreamflow embed` fills missing vectors by hand (progress bar); `--status` only counts, never loads a model.
"""

from __future__ import annotations

import logging

from engine.config.settings import Settings

# numpy, the embedders and storage.index.vectors are imported inside the functions: the CLI imports this module
# and must not pay for them on every command.

log = logging.getLogger(__name__)


def vector_index(settings: Settings | None = None):
    """A lazy `storage.index.vectors.VectorIndex` for the configured embedder; None when vectors are off or
    misconfigured. Nothing heavy loads until a query meets stored vectors of this model."""
    from engine.models.embedders import EmbedderError, make_embedder
    from storage.index import vectors as _vectors

    settings = settings or Settings()
    try:
        embedder = make_embedder(settings)
    except EmbedderError as exc:
        log.warning("vector search off: %s", exc)
        return None
    if embedder is None:
        return None
    return _vectors.VectorIndex(embedder.model_id, lambda query: embedder.embed([query])[0],
                                weight=settings.vector_weight, rrf_k=settings.vector_rrf_k, embedder=embedder,
                                close=settings.vector_close)


def attach(memory, long_running: bool = False, settings: Settings | None = None):
    """Give an in-process `Memory` vector search when this process should have it (see the module docstring).

    With `long_running`, also start and return the background `storage.index.vectors.Backfiller` (call its `stop()`
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
    index.embedder.warm()
    from storage.index.vectors import Backfiller

    return Backfiller(memory.db, index.embedder, index=index).start()


def words_only(settings: Settings | None = None) -> str | None:
    """What `start` and `status` say when an embedder is configured but cannot run here: search goes by keyword
    and the dream compares facts by their words; None when it can run or none is configured."""
    from engine.models.embedders import unavailable

    reason = unavailable(settings)
    return (f"{reason}; meanwhile search goes by keyword and the dream compares facts by their "
            "words (DREAMFLOW_EMBEDDER=none chooses that without this warning)") if reason else None


def status(memory, settings: Settings | None = None) -> dict:
    """Vector coverage of the index: {chunks, texts, embedded, pending, pieces, model, dim, configured}."""
    from engine.models.embedders import EmbedderError, make_embedder
    from storage.index import vectors as _vectors

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
