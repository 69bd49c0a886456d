"""Embedders: the real packaged MiniLM on the CPU, and the real `openai` client against a local HTTP server."""

import subprocess
import sys

import numpy as np
import pytest

from engine.config.settings import Settings
from engine.models import embedders
from engine.models.embedders import EmbedderError, LocalEmbedder, OpenAIEmbedder, make_embedder


def word_vectors(texts: list[str]) -> list[list[float]]:
    """A deterministic bag-of-words embedding the scripted server returns (8 dims, not normalised)."""
    out = []
    for text in texts:
        v = [0.0] * 8
        for word in text.lower().split():
            v[sum(map(ord, word)) % 8] += 1.0
        out.append(v)
    return out


@pytest.fixture
def endpoint(llm_server):
    llm_server.reset()
    llm_server.embedder = word_vectors
    yield llm_server
    llm_server.reset()


def test_local_model_ranks_a_paraphrase_above_an_unrelated_text():
    vecs = LocalEmbedder().embed([
        "When did she adopt a child?",
        "She has been applying to adoption agencies since June.",
        "The car needs a new gearbox and brake pads.",
    ])
    assert vecs.shape == (3, 384) and vecs.dtype == np.float32
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    assert vecs[0] @ vecs[1] > vecs[0] @ vecs[2] + 0.2


def test_local_model_loads_once_per_process():
    assert embedders._load_local_model() is embedders._load_local_model()
    assert LocalEmbedder().embed([]).shape[0] == 0


@pytest.mark.e2e
def test_importing_embedders_and_vectors_does_not_import_torch_or_openai():
    code = ("import sys, engine.models.embedders, storage.index.vectors; "
            "print(sorted(m for m in ('torch', 'sentence_transformers', 'openai') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_openai_embedder_batches_keeps_order_and_normalises(endpoint):
    emb = OpenAIEmbedder(endpoint.base_url, "tiny-embed", batch_size=2)
    texts = ["alpha beta", "gamma", "delta delta epsilon", "zeta", "eta theta"]
    vecs = emb.embed(texts)
    assert vecs.shape == (5, 8)
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-6)
    expected = np.array(word_vectors(texts), dtype=np.float32)
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    assert np.allclose(vecs, expected, atol=1e-6)
    sent = [r["input"] for r in endpoint.requests]
    assert sent == [texts[0:2], texts[2:4], texts[4:5]]
    assert all(r["model"] == "tiny-embed" for r in endpoint.requests)
    assert emb.model_id == f"openai:tiny-embed@{endpoint.base_url}"


def test_openai_embedder_failure_is_an_embedder_error(endpoint):
    endpoint.embedder = None  # the server answers HTTP 500
    emb = OpenAIEmbedder(endpoint.base_url, "tiny-embed", max_retries=0)
    with pytest.raises(EmbedderError, match="failed"):
        emb.embed(["hello"])


def test_openai_embedder_rejects_a_wrong_number_of_vectors(endpoint):
    endpoint.embedder = lambda texts: word_vectors(texts)[:-1]
    with pytest.raises(EmbedderError, match="1 vectors for 2 texts|0 vectors|vectors for"):
        OpenAIEmbedder(endpoint.base_url, "tiny-embed", max_retries=0).embed(["a b", "c d"])


def test_unreachable_endpoint_is_an_embedder_error():
    emb = OpenAIEmbedder("http://127.0.0.1:9/v1", "tiny-embed", timeout=2, max_retries=0)
    with pytest.raises(EmbedderError):
        emb.embed(["hello"])


def test_make_embedder_follows_settings(endpoint):
    assert isinstance(make_embedder(Settings(embedder="local")), LocalEmbedder)
    assert make_embedder(Settings(embedder="none")) is None
    chosen = make_embedder(Settings(embedder="openai", embed_base_url=endpoint.base_url, embed_model="m"))
    assert isinstance(chosen, OpenAIEmbedder) and chosen.embed(["x y"]).shape == (1, 8)
    with pytest.raises(EmbedderError, match="EMBED_BASE_URL"):
        make_embedder(Settings(embedder="openai", embed_base_url=None, embed_model=None))
    with pytest.raises(EmbedderError, match="unknown embedder"):
        make_embedder(Settings(embedder="word2vec"))
