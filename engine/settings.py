"""Settings read from the environment (and CLI flags), kept as a plain dataclass so the CLI starts fast."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path


def _env(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    return value if value not in (None, "") else default


def dreamflow_home() -> Path:
    """Per-user state outside any repo (Prefect server DB, logs): `DREAMFLOW_HOME` or `~/.dreamflow`."""
    return Path(_env("DREAMFLOW_HOME", str(Path.home() / ".dreamflow"))).expanduser()


@dataclass
class Settings:
    """Every knob in one place. Environment variables are named `DREAMFLOW_<FIELD>` in upper case."""

    workspace: Path = field(default_factory=lambda: Path(_env("DREAMFLOW_WORKSPACE", ".dreamflow")))
    llm_base_url: str | None = field(default_factory=lambda: _env("DREAMFLOW_LLM_BASE_URL"))
    llm_api_key: str | None = field(default_factory=lambda: _env("DREAMFLOW_LLM_API_KEY"))
    llm_model: str | None = field(default_factory=lambda: _env("DREAMFLOW_LLM_MODEL"))
    llm_timeout: float = field(default_factory=lambda: float(_env("DREAMFLOW_LLM_TIMEOUT", "60")))
    llm_max_retries: int = field(default_factory=lambda: int(_env("DREAMFLOW_LLM_MAX_RETRIES", "2")))
    embedder: str = field(default_factory=lambda: _env("DREAMFLOW_EMBEDDER", "local"))  # local | openai | none
    embed_base_url: str | None = field(default_factory=lambda: _env("DREAMFLOW_EMBED_BASE_URL"))
    embed_api_key: str | None = field(default_factory=lambda: _env("DREAMFLOW_EMBED_API_KEY"))
    embed_model: str | None = field(default_factory=lambda: _env("DREAMFLOW_EMBED_MODEL"))
    # RRF of keyword (weight 1) and vector lists; defaults tuned for local MiniLM on LoCoMo (README "Semantic recall")
    vector_weight: float = field(default_factory=lambda: float(_env("DREAMFLOW_VECTOR_WEIGHT", "0.2")))
    vector_rrf_k: int = field(default_factory=lambda: int(_env("DREAMFLOW_VECTOR_RRF_K", "10")))
    cli_vectors: bool = field(default_factory=lambda: _env("DREAMFLOW_CLI_VECTORS", "0") in ("1", "true", "yes"))
    api_token: str | None = field(default_factory=lambda: _env("DREAMFLOW_API_TOKEN"))
    # most characters a job (task or agent tool) may write into one card or node per call (engine/job_memory.py)
    max_write_chars: int = field(default_factory=lambda: int(_env("DREAMFLOW_MAX_WRITE_CHARS", "100000")))
    turns_per_summary: int = field(default_factory=lambda: int(_env("DREAMFLOW_TURNS_PER_SUMMARY", "10")))
    dream_cron: str = field(default_factory=lambda: _env("DREAMFLOW_DREAM_CRON", "0 3 * * *"))
    optimize_cron: str = field(default_factory=lambda: _env("DREAMFLOW_OPTIMIZE_CRON", "30 4 * * *"))
    dream_concurrency: int = field(default_factory=lambda: int(_env("DREAMFLOW_DREAM_CONCURRENCY", "3")))
    timezone: str | None = field(default_factory=lambda: _env("DREAMFLOW_TIMEZONE"))

    @property
    def llm_configured(self) -> bool:
        return bool(self.llm_base_url and self.llm_model)
