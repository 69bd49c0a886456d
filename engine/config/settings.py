"""Settings read from the environment (and CLI flags), kept as a plain dataclass so the CLI starts fast."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from storage.errors import InvalidInput


DEFAULT_PORT = 8420  # the service's HTTP API
DEFAULT_PREFECT_PORT = 4200  # the Prefect server (and UI) the service starts


def _env(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    return value if value not in (None, "") else default


def _num(kind: type, name: str, default: str | None = None):
    """The number `name` holds (`kind` int or float; None when unset without default); a clear error when it
    is not one."""
    value = _env(name, default)
    if value is None:
        return None
    try:
        return kind(value)
    except ValueError:
        raise InvalidInput(f"{name} must be {'an integer' if kind is int else 'a number'}, got {value!r}") from None


def _switch(name: str) -> bool:
    """An on/off setting that is on unless set to 0, false, no or off."""
    return (_env(name) or "1").strip().lower() not in ("0", "false", "no", "off")


def dreamflow_home() -> Path:
    """Dreamflow's own folder, never a workspace (workspace registry, tokens, Prefect server DB, logs):
    `DREAMFLOW_HOME`, else `$XDG_STATE_HOME/dreamflow` (default `~/.local/state/dreamflow`). Not `~/.dreamflow`:
    that is the default workspace `./.dreamflow` of anyone working in their home folder."""
    state = _env("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(_env("DREAMFLOW_HOME", str(Path(state) / "dreamflow"))).expanduser()


ADMIN_FILE = "admin-token"  # in dreamflow_home(): the admin token `dreamflow token create` made (engine/config/grants.py)


def admin_token() -> str | None:
    """`DREAMFLOW_API_TOKEN`, else the one `token create` kept in `$DREAMFLOW_HOME/admin-token`."""
    value = _env("DREAMFLOW_API_TOKEN")
    if value:
        return value
    try:
        return (dreamflow_home() / ADMIN_FILE).read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


@dataclass
class Settings:
    """Every knob in one place. Environment variables are named `DREAMFLOW_<FIELD>` in upper case."""

    llm_base_url: str | None = field(default_factory=lambda: _env("DREAMFLOW_LLM_BASE_URL"))
    llm_api_key: str | None = field(default_factory=lambda: _env("DREAMFLOW_LLM_API_KEY"))
    llm_model: str | None = field(default_factory=lambda: _env("DREAMFLOW_LLM_MODEL"))
    # per call; high enough for a 1.5B model on 2 CPU cores (one integrate call took 158-232 s there)
    llm_timeout: float = field(default_factory=lambda: _num(float, "DREAMFLOW_LLM_TIMEOUT", "600"))
    llm_max_retries: int = field(default_factory=lambda: _num(int, "DREAMFLOW_LLM_MAX_RETRIES", "2"))
    llm_max_tokens: int = field(default_factory=lambda: _num(int, "DREAMFLOW_LLM_MAX_TOKENS", "2048"))
    # LLM calls at once per process; 0 = auto: 1 for an endpoint on this machine, else unbounded
    llm_concurrency: int = field(default_factory=lambda: _num(int, "DREAMFLOW_LLM_CONCURRENCY", "0"))
    llm_temperature: float | None = field(default_factory=lambda: _num(float, "DREAMFLOW_LLM_TEMPERATURE"))
    llm_frequency_penalty: float | None = field(
        default_factory=lambda: _num(float, "DREAMFLOW_LLM_FREQUENCY_PENALTY"))
    llm_repeat_penalty: float | None = field(default_factory=lambda: _num(float, "DREAMFLOW_LLM_REPEAT_PENALTY"))
    # auto (json_schema, falling back to json_object, then prompt only) | json_schema | json_object | none
    llm_json: str = field(default_factory=lambda: _env("DREAMFLOW_LLM_JSON", "auto"))
    embedder: str = field(default_factory=lambda: _env("DREAMFLOW_EMBEDDER", "local"))  # local | openai | none
    embed_base_url: str | None = field(default_factory=lambda: _env("DREAMFLOW_EMBED_BASE_URL"))
    embed_api_key: str | None = field(default_factory=lambda: _env("DREAMFLOW_EMBED_API_KEY"))
    embed_model: str | None = field(default_factory=lambda: _env("DREAMFLOW_EMBED_MODEL"))
    # RRF of keyword (weight 1) and vector lists; defaults tuned for local MiniLM on LoCoMo (docs/benchmarks.md)
    vector_weight: float = field(default_factory=lambda: _num(float, "DREAMFLOW_VECTOR_WEIGHT", "0.2"))
    vector_rrf_k: int = field(default_factory=lambda: _num(int, "DREAMFLOW_VECTOR_RRF_K", "10"))
    # the cosine at which a text answers a prompt it shares one word with (the hook's gate); tuned likewise
    vector_close: float = field(default_factory=lambda: _num(float, "DREAMFLOW_VECTOR_CLOSE", "0.4"))
    cli_vectors: bool = field(default_factory=lambda: _env("DREAMFLOW_CLI_VECTORS", "0") in ("1", "true", "yes"))
    # DREAMFLOW_API_TOKEN, else the one `dreamflow token create` kept in $DREAMFLOW_HOME/admin-token
    api_token: str | None = field(default_factory=admin_token)
    # HTTP API guards (dreamflow/http/http_guard.py): bodies past this get 413; extra `Host` names it answers to
    max_body_bytes: int = field(default_factory=lambda: _num(int, "DREAMFLOW_MAX_BODY_BYTES", str(32 << 20)))
    allowed_hosts: list[str] = field(default_factory=lambda: [
        name.strip() for name in (_env("DREAMFLOW_ALLOWED_HOSTS") or "").split(",") if name.strip()])
    # most characters a job (a flow task) may write into one card or node per call (engine/access/job_memory.py)
    max_write_chars: int = field(default_factory=lambda: _num(int, "DREAMFLOW_MAX_WRITE_CHARS", "100000"))
    turns_per_summary: int = field(default_factory=lambda: _num(int, "DREAMFLOW_TURNS_PER_SUMMARY", "10"))
    # the most one Claude Code hook delivery reads and records (dreamflow/hooks/events.py); the rest waits for the next
    hook_max_seconds: float = field(default_factory=lambda: _num(float, "DREAMFLOW_HOOK_MAX_SECONDS", "10"))
    hook_max_turns: int = field(default_factory=lambda: _num(int, "DREAMFLOW_HOOK_MAX_TURNS", "500"))
    hook_max_bytes: int = field(default_factory=lambda: _num(int, "DREAMFLOW_HOOK_MAX_BYTES", str(64 << 20)))
    # a transcript line longer than this is skipped and reported (a pasted screenshot is a few MB)
    hook_max_line_bytes: int = field(default_factory=lambda: _num(int, "DREAMFLOW_HOOK_MAX_LINE_BYTES", str(8 << 20)))
    # what `dreamflow hook claude-code` puts before the agent (dreamflow/hooks/context.py): each event on/off,
    # tokens per prompt and per session start, the least keyword score, share of the prompt's term weight and
    # distinct words of the prompt a match must reach for a prompt to get anything (storage/search/relevance.py: the
    # same at any size of the memory; docs/benchmarks.md: measured on LoCoMo), seconds allowed per answer
    inject_prompt: bool = field(default_factory=lambda: _switch("DREAMFLOW_INJECT_PROMPT"))
    inject_start: bool = field(default_factory=lambda: _switch("DREAMFLOW_INJECT_START"))
    inject_prompt_tokens: int = field(default_factory=lambda: _num(int, "DREAMFLOW_INJECT_PROMPT_TOKENS", "600"))
    inject_start_tokens: int = field(default_factory=lambda: _num(int, "DREAMFLOW_INJECT_START_TOKENS", "800"))
    inject_min_score: float = field(default_factory=lambda: _num(float, "DREAMFLOW_INJECT_MIN_SCORE", "4"))
    inject_min_relevance: float = field(default_factory=lambda: _num(float, "DREAMFLOW_INJECT_MIN_RELEVANCE", "0.5"))
    inject_min_words: int = field(default_factory=lambda: _num(int, "DREAMFLOW_INJECT_MIN_WORDS", "2"))
    inject_timeout: float = field(default_factory=lambda: _num(float, "DREAMFLOW_INJECT_TIMEOUT", "3"))
    dream_cron: str = field(default_factory=lambda: _env("DREAMFLOW_DREAM_CRON", "0 3 * * *"))
    optimize_cron: str = field(default_factory=lambda: _env("DREAMFLOW_OPTIMIZE_CRON", "30 4 * * *"))
    doctor_cron: str | None = field(default_factory=lambda: _env("DREAMFLOW_DOCTOR_CRON"))  # unset: no schedule
    dream_concurrency: int = field(default_factory=lambda: _num(int, "DREAMFLOW_DREAM_CONCURRENCY", "3"))
    timezone: str | None = field(default_factory=lambda: _env("DREAMFLOW_TIMEZONE"))
    mcp_tools: str = field(default_factory=lambda: _env("DREAMFLOW_MCP_TOOLS", "default"))  # default | all (/mcp)
    # open /mcp sessions; at the cap a new one ends the least recently used idle one (~40 KB each)
    mcp_max_sessions: int = field(default_factory=lambda: _num(int, "DREAMFLOW_MCP_MAX_SESSIONS", "1000"))
    # indexes a service keeps open between calls; the least recently used of more is closed (dreamflow/service/hosting.py)
    max_open_indexes: int = field(default_factory=lambda: _num(int, "DREAMFLOW_MAX_OPEN_INDEXES", "16"))

    @property
    def llm_configured(self) -> bool:
        return bool(self.llm_base_url and self.llm_model)
