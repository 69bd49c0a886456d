"""The one module that talks to an LLM: an OpenAI-compatible chat client, structured outputs validated with
pydantic (one repair attempt), and a bounded tool-calling agent loop.

Any endpoint speaking the chat-completions protocol works (OpenAI, vLLM, llama.cpp, Ollama, LM Studio...).
Configure it with `DREAMFLOW_LLM_BASE_URL`, `DREAMFLOW_LLM_MODEL` and optionally `DREAMFLOW_LLM_API_KEY`,
`DREAMFLOW_LLM_TIMEOUT` (seconds per call) and `DREAMFLOW_LLM_MAX_RETRIES` (retries with backoff).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import openai
from pydantic import BaseModel, ValidationError

from engine.settings import Settings
from storage.errors import DreamflowError

if TYPE_CHECKING:
    from engine.toolbox import Toolbox

T = TypeVar("T", bound=BaseModel)


class LLMNotConfigured(DreamflowError):
    """No LLM endpoint is configured, so jobs that need one cannot run."""

    exit_code = 6
    http_status = 503


class LLMError(DreamflowError):
    """A call to the LLM failed (timeout, HTTP error) or its answer could not be used."""

    exit_code = 7
    http_status = 502


@dataclass
class Usage:
    """Tokens and time spent on LLM calls; `seconds` is wall time inside calls (for overhead accounting)."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    seconds: float = 0.0

    def add(self, other: Usage | dict | None) -> Usage:
        """Add another Usage (or its dict form) to this one, in place; returns self."""
        if other is None:
            return self
        data = other if isinstance(other, dict) else asdict(other)
        for key in ("calls", "prompt_tokens", "completion_tokens", "total_tokens", "seconds"):
            setattr(self, key, getattr(self, key) + (data.get(key) or 0))
        return self

    def as_dict(self) -> dict:
        data = asdict(self)
        data["seconds"] = round(self.seconds, 3)
        return data


def load_prompt(name: str) -> str:
    """The system prompt `flows/prompts/<name>.md`."""
    import flows

    path = Path(flows.__file__).parent / "prompts" / f"{name}.md"
    if not path.is_file():
        raise FileNotFoundError(f"no prompt flows/prompts/{name}.md")
    return path.read_text(encoding="utf-8")


def require_llm(settings: Settings | None = None) -> Settings:
    """Return the settings if an LLM is configured, else raise a clear `LLMNotConfigured`."""
    settings = settings or Settings()
    if not settings.llm_configured:
        raise LLMNotConfigured(
            "no LLM configured: set DREAMFLOW_LLM_BASE_URL and DREAMFLOW_LLM_MODEL "
            "(any OpenAI-compatible endpoint, e.g. http://127.0.0.1:8080/v1); nothing was changed"
        )
    return settings


class LLM:
    """A chat client for one model; counts usage over its lifetime (one instance per task)."""

    def __init__(self, base_url: str, model: str, api_key: str | None = None, timeout: float = 60.0,
                 max_retries: int = 2):
        self.model = model
        self.usage = Usage()
        self._client = _client(base_url, api_key, timeout, max_retries)

    @classmethod
    def from_settings(cls, settings: Settings | None = None) -> LLM:
        """Client configured from `DREAMFLOW_LLM_*`; raises `LLMNotConfigured` when unset."""
        s = require_llm(settings)
        return cls(s.llm_base_url, s.llm_model, s.llm_api_key, s.llm_timeout, s.llm_max_retries)

    def chat(self, messages: list[dict], tools: list[dict] | None = None) -> Any:
        """One chat-completions call; returns the assistant message. Errors become `LLMError`."""
        kwargs: dict[str, Any] = {"model": self.model, "messages": messages}
        if tools:
            kwargs["tools"] = tools
        started = time.perf_counter()
        self.usage.calls += 1  # attempted calls, failed ones included
        try:
            response = self._client.chat.completions.create(**kwargs)
        except openai.APITimeoutError as exc:
            raise LLMError(f"LLM call timed out ({self.model}): {exc}") from None
        except openai.OpenAIError as exc:
            raise LLMError(f"LLM call failed ({self.model}): {exc}") from None
        except ValueError as exc:  # a body that is not JSON
            raise LLMError(f"LLM returned an unreadable response ({self.model}): {exc}") from None
        finally:
            self.usage.seconds += time.perf_counter() - started
        if response.usage is not None:
            self.usage.prompt_tokens += response.usage.prompt_tokens or 0
            self.usage.completion_tokens += response.usage.completion_tokens or 0
            self.usage.total_tokens += response.usage.total_tokens or 0
        if not response.choices:
            raise LLMError(f"LLM returned no choices ({self.model})")
        return response.choices[0].message

    def structured(self, messages: list[dict], schema: type[T]) -> T:
        """Ask for a JSON answer matching `schema`; one repair attempt on invalid output, then `LLMError`."""
        message = self.chat(messages)
        return self._validate_or_repair(messages, message.content or "", schema)

    def agent(self, messages: list[dict], schema: type[T], toolbox: Toolbox | None = None,
              max_steps: int = 8) -> T:
        """Bounded tool-calling loop: run the model's tool calls until it answers with JSON for `schema`.

        Tool errors are returned to the model as tool results; errors a toolbox marks fatal (e.g. a rejected
        write) propagate and fail the caller. After `max_steps` model calls without an answer: `LLMError`.
        """
        messages = list(messages)
        tools = toolbox.schemas() if toolbox else None
        for _ in range(max_steps):
            message = self.chat(messages, tools=tools)
            calls = message.tool_calls or []
            if not calls:
                return self._validate_or_repair(messages, message.content or "", schema)
            messages.append({
                "role": "assistant",
                "content": message.content or "",
                "tool_calls": [{"id": c.id, "type": "function",
                                "function": {"name": c.function.name, "arguments": c.function.arguments}}
                               for c in calls],
            })
            for call in calls:
                result = toolbox.call(call.function.name, call.function.arguments) if toolbox else \
                    {"error": "no tools are available"}
                messages.append({"role": "tool", "tool_call_id": call.id,
                                 "content": json.dumps(result, ensure_ascii=False, default=str)})
        raise LLMError(f"the model gave no final answer within {max_steps} steps")

    def _validate_or_repair(self, messages: list[dict], content: str, schema: type[T]) -> T:
        try:
            return parse_model(content, schema)
        except ValueError as first:
            repair = messages + [
                {"role": "assistant", "content": content},
                {"role": "user", "content": repair_prompt(first, schema)},
            ]
        content = self.chat(repair).content or ""
        try:
            return parse_model(content, schema)
        except ValueError as second:
            raise LLMError(f"the model's answer is not valid {schema.__name__} after one repair: {second}") \
                from None


@lru_cache(maxsize=8)
def _client(base_url: str, api_key: str | None, timeout: float, max_retries: int) -> openai.OpenAI:
    """One SDK client (and HTTP connection pool) per endpoint and process: building one costs ~60 ms.
    Local servers ignore the key, but the SDK insists on one."""
    return openai.OpenAI(base_url=base_url, api_key=api_key or "not-needed", timeout=timeout,
                         max_retries=max_retries)


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


def extract_json(text: str) -> Any:
    """The JSON value in a model's reply: the whole text, a fenced block, or the outermost {...}."""
    candidates = [text.strip()]
    candidates += [m.strip() for m in _FENCE.findall(text)]
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        candidates.append(text[start:end + 1])
    for candidate in candidates:
        try:
            return json.loads(candidate)
        except (json.JSONDecodeError, ValueError):
            continue
    raise ValueError("the reply contains no JSON object")


def parse_model(text: str, schema: type[T]) -> T:
    """Parse and validate a reply as `schema`; raises ValueError with a short, model-readable reason."""
    data = extract_json(text)
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '(root)'}: {e['msg']}" for e in exc.errors())
        raise ValueError(problems) from None


def repair_prompt(error: Exception, schema: type[BaseModel]) -> str:
    return (
        f"Your previous answer could not be used: {error}.\n"
        "Reply again with only one JSON object (no prose, no code fence) matching this JSON schema:\n"
        + json.dumps(schema.model_json_schema(), ensure_ascii=False)
    )
