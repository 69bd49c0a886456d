"""The one module that talks to an LLM: an OpenAI-compatible chat client and structured outputs validated with
pydantic (one repair attempt).

Any endpoint speaking the chat-completions protocol works (OpenAI, vLLM, llama.cpp, Ollama, LM Studio...).
Configure it with `DREAMFLOW_LLM_*` (engine/config/settings.py, docs/settings.md). What holds up on small
local models:

- structured calls send `response_format` json_schema built from the pydantic model (`response_schema`);
  an endpoint that answers HTTP 400 (or 422) gets json_object (with the schema as llama.cpp's `schema`), then
  prompt-only, and the mode that worked is remembered per endpoint for the process;
- every call carries `max_tokens`; calls to one endpoint are bounded by `DREAMFLOW_LLM_CONCURRENCY`;
- a tool call written as text is never an answer (the repair turn says no tool runs from text);
- a job may pass `check(answer) -> (rule, message) | None`, its content rules (engine/memory/quality.py): a refused
  answer gets the same one repair turn, naming the rule; the repair turn shows the answer's shape with
  placeholders (never an example a model could copy as memory);
- usage (tokens, seconds, first-try answers, repairs, failures, refusals per rule) is counted per call kind.
"""

from __future__ import annotations

import copy
import json
import re
import threading
import time
from contextlib import nullcontext
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Callable, TypeVar
from urllib.parse import urlparse

from pydantic import BaseModel, ValidationError

from engine.access import stopped_runs
from engine.config.settings import Settings
from engine.models.usage import Usage
from storage.errors import AnswerRefused, InvalidInput, LLMError, LLMNotConfigured, LLMRejected

if TYPE_CHECKING:  # the SDK (~0.4 s to import) is loaded by the first call: a run that asks no LLM never loads it
    import openai

T = TypeVar("T", bound=BaseModel)
Check = Callable[[Any], "tuple[str, str] | None"]  # an answer -> (rule, message) when refused, else None

JSON_MODES = ("json_schema", "json_object", "none")  # DREAMFLOW_LLM_JSON's forced modes
# the fallback chain, strongest first: json_object first with the schema (llama.cpp's `schema` key), then
# without it for a server that refuses keys it does not know
CHAIN = ("json_schema", "json_object+schema", "json_object", "none")


# ---- settings ------------------------------------------------------------------------------

def require_llm(settings: Settings | None = None) -> Settings:
    """Return the settings if an LLM is configured (and its modes are known), else raise a clear error."""
    settings = settings or Settings()
    if not settings.llm_configured:
        raise LLMNotConfigured(
            "no LLM configured: set DREAMFLOW_LLM_BASE_URL and DREAMFLOW_LLM_MODEL "
            "(any OpenAI-compatible endpoint, e.g. http://127.0.0.1:8080/v1); nothing was changed"
        )
    if settings.llm_json not in ("auto",) + JSON_MODES:
        raise InvalidInput(f"DREAMFLOW_LLM_JSON must be auto or one of {', '.join(JSON_MODES)}, "
                           f"got {settings.llm_json!r}")
    return settings


# What each endpoint (base URL, model) was found to support in this process: {"json": mode}.
_learned: dict[tuple[str, str], dict] = {}
_learned_lock = threading.Lock()


def learned(base_url: str, model: str) -> dict:
    """What this process has learned about an endpoint: `{"json": mode}` (once known)."""
    with _learned_lock:
        return dict(_learned.get((base_url, model), {}))


def forget_endpoints() -> None:
    """Forget what was learned about every endpoint (the next calls probe again)."""
    with _learned_lock:
        _learned.clear()


def _learn(endpoint: tuple[str, str], key: str, value: Any) -> bool:
    """Remember `key=value` for the endpoint; True when it is news."""
    with _learned_lock:
        known = _learned.setdefault(endpoint, {})
        news = known.get(key) != value
        known[key] = value
        return news


def _log(level: str, message: str, *args) -> None:
    from engine.config.prefect_env import run_logger

    getattr(run_logger(), level)(message, *args)


# ---- the client ----------------------------------------------------------------------------------------

class LLM:
    """A chat client for one model; counts usage over its lifetime (one instance per task)."""

    def __init__(self, settings: Settings):
        self.settings = require_llm(settings)
        self.model = settings.llm_model
        self.endpoint = (settings.llm_base_url, settings.llm_model)
        self.usage = Usage()
        self._client = _client(settings.llm_base_url, settings.llm_api_key, settings.llm_timeout,
                               settings.llm_max_retries)
        self._gate = _gate(settings.llm_base_url, concurrency(settings))

    @classmethod
    def from_settings(cls, settings: Settings | None = None) -> LLM:
        """Client configured from `DREAMFLOW_LLM_*`; raises `LLMNotConfigured` when unset."""
        return cls(settings or Settings())

    def chat(self, messages: list[dict], kind: str = "chat") -> Any:
        """One chat-completions call; returns the assistant message. Errors become `LLMError`."""
        return self._complete(messages, kind).message

    def structured(self, messages: list[dict], schema: type[T], kind: str = "structured",
                   json_schema: dict | None = None, check: Check | None = None) -> T:
        """Ask for a JSON answer matching `schema`, constrained by `json_schema` (default: built from
        `schema`) where the endpoint allows; one repair attempt (showing the shape) on an invalid answer or
        one `check` refuses, then `LLMError` (`AnswerRefused` for a refusal)."""
        return self._counted(kind, lambda: self._answer(messages, schema, kind, json_schema, check))

    # -- internals --------------------------------------------------------------------------------------
    def _counted(self, kind: str, run):
        self.usage.note(kind, "answers")
        try:
            return run()
        except LLMError:
            self.usage.note(kind, "failures")
            raise

    def _answer(self, messages, schema, kind, json_schema, check):
        choice = self._constrained(messages, schema, kind, json_schema)
        return self._repaired(messages, choice, schema, kind, json_schema, check)

    def _repaired(self, messages, choice, schema: type[T], kind, json_schema, check) -> T:
        """The answer of `choice`, after at most one repair turn for its form (not valid JSON for `schema`)
        and one for its content (a rule `check` names); failing a second time is an error."""
        shape = shape_of(json_schema or response_schema(schema))
        repaired: set[str] = set()
        while True:
            content = choice.message.content or ""
            try:
                answer = self._parse(content, schema, choice)
            except ValueError as exc:
                if "form" in repaired:
                    raise LLMError(f"the model's answer is not valid {schema.__name__} after one repair: {exc}") \
                        from None
                problem, why = str(exc), "form"
            else:
                refused = self._refusal(answer, check)
                if refused is None:
                    if not repaired:
                        self.usage.note(kind, "first_try")
                    return answer
                if "content" in repaired:
                    raise AnswerRefused(f"the model's answer was refused after one repair, rule `{refused[0]}`: "
                                        f"{refused[1]}", refused[0])
                problem, why = f"it breaks the rule `{refused[0]}`: {refused[1]}", "content"
            repaired.add(why)
            self.usage.note(kind, "repairs")
            messages = messages + [{"role": "assistant", "content": content},
                                   {"role": "user", "content": repair_prompt(problem, shape)}]
            choice = self._constrained(messages, schema, "repair", json_schema)

    def _refusal(self, answer, check: Check | None) -> tuple[str, str] | None:
        refused = check(answer) if check else None
        if refused is not None:
            self.usage.gate(refused[0])
        return refused

    def _parse(self, content: str, schema: type[T], choice) -> T:
        written = text_tool_call(content)
        if written is not None:
            raise ValueError(f"you wrote a call of the tool {written[0]!r} as text; no tool runs from text here, "
                             "so answer with the final JSON object itself")
        try:
            return parse_model(content, schema)
        except ValueError as exc:
            if choice.finish_reason == "length":
                raise ValueError(f"the reply was cut at the limit of {self.settings.llm_max_tokens} tokens "
                                 f"({exc}); answer more briefly") from None
            raise

    def _constrained(self, messages, schema, kind, json_schema):
        """One call asking for JSON in the strongest mode the endpoint takes (fallback on HTTP 400)."""
        forced = self.settings.llm_json
        if forced == "auto":
            modes = list(CHAIN[CHAIN.index(learned(*self.endpoint).get("json", CHAIN[0])):])
        else:
            modes = [m for m in CHAIN if m.split("+")[0] == forced]
        for mode in modes:
            try:
                choice = self._complete(messages, kind, response_format=response_format(mode, schema, json_schema))
            except LLMRejected as exc:
                if mode == modes[-1]:
                    raise
                _log("warning", "LLM %s refused response_format %s (%s); trying %s", self.model, mode, exc,
                     modes[modes.index(mode) + 1])
                continue
            if forced == "auto" and _learn(self.endpoint, "json", mode):
                _log("info", "LLM %s: structured answers use response_format %s", self.model, mode)
            return choice
        raise AssertionError("unreachable: the last mode raises")

    def _complete(self, messages: list[dict], kind: str, response_format: dict | None = None) -> Any:
        import openai

        stopped_runs.check()  # a run stopped while it runs on the service's thread asks nothing more
        kwargs = self._request(messages, response_format)
        with self._gate or nullcontext():
            started = time.perf_counter()
            response = None
            try:
                response = self._client.chat.completions.create(**kwargs)
            except openai.APITimeoutError as exc:
                raise LLMError(f"LLM call timed out ({self.where}, DREAMFLOW_LLM_TIMEOUT="
                               f"{self.settings.llm_timeout:g} s): {exc}") from None
            except (openai.BadRequestError, openai.UnprocessableEntityError) as exc:  # 400; 422 (e.g. TGI)
                raise LLMRejected(f"LLM call rejected ({self.where}): {exc}") from None
            except openai.OpenAIError as exc:
                raise LLMError(f"LLM call failed ({self.where}): {str(exc).rstrip('.')}{_what_to_check(exc)}") \
                    from None
            except ValueError as exc:  # a body that is not JSON
                raise LLMError(f"LLM returned an unreadable response ({self.where}): {exc}") from None
            finally:
                self.usage.record(kind, time.perf_counter() - started, getattr(response, "usage", None))
        if not response.choices:
            raise LLMError(f"LLM returned no choices ({self.where})")
        return response.choices[0]

    @property
    def where(self) -> str:
        """`model M at URL`: what an error names, so the reader knows which endpoint failed."""
        return f"model {self.model} at {self.settings.llm_base_url}"

    def _request(self, messages, response_format) -> dict:
        s = self.settings
        kwargs: dict[str, Any] = {"model": self.model, "messages": messages, "max_tokens": s.llm_max_tokens}
        optional = {"temperature": s.llm_temperature, "frequency_penalty": s.llm_frequency_penalty,
                    "response_format": response_format}
        kwargs.update({k: v for k, v in optional.items() if v is not None})
        if s.llm_repeat_penalty is not None:  # llama.cpp's name; not an OpenAI parameter
            kwargs["extra_body"] = {"repeat_penalty": s.llm_repeat_penalty}
        return kwargs


def _what_to_check(exc: Exception) -> str:
    """The setting to look at for a failed call: '' when the error says it all (a 5xx, an answer cut off)."""
    import openai

    if isinstance(exc, openai.APIConnectionError):
        return ("; check that the LLM server runs and that DREAMFLOW_LLM_BASE_URL is its OpenAI-compatible "
                "address (usually ending in /v1)")
    if isinstance(exc, (openai.AuthenticationError, openai.PermissionDeniedError)):
        return "; check DREAMFLOW_LLM_API_KEY"
    if isinstance(exc, openai.NotFoundError):
        return ("; check DREAMFLOW_LLM_MODEL (a model the server serves) and that DREAMFLOW_LLM_BASE_URL ends "
                "where its API starts (usually /v1)")
    return ""


def concurrency(settings: Settings) -> int:
    """LLM calls at once per process (0: unbounded): `DREAMFLOW_LLM_CONCURRENCY`, else 1 for an endpoint
    on this machine (a local server runs one request at a time anyway; parallel ones only time out)."""
    if settings.llm_concurrency > 0:
        return settings.llm_concurrency
    host = urlparse(settings.llm_base_url or "").hostname or ""
    return 1 if host in ("localhost", "::1", "0.0.0.0") or host.startswith("127.") else 0


@lru_cache(maxsize=8)
def _gate(base_url: str, limit: int) -> threading.BoundedSemaphore | None:
    return threading.BoundedSemaphore(limit) if limit > 0 else None


@lru_cache(maxsize=8)
def _client(base_url: str, api_key: str | None, timeout: float, max_retries: int) -> openai.OpenAI:
    """One SDK client (and HTTP connection pool) per endpoint and process: building one costs ~60 ms.
    Local servers ignore the key, but the SDK insists on one."""
    import openai

    return openai.OpenAI(base_url=base_url, api_key=api_key or "not-needed", timeout=timeout,
                         max_retries=max_retries)


# ---- constrained output ----------------------------------------------------------------------------------

def response_schema(model: type[BaseModel]) -> dict:
    """The JSON schema a reply for `model` must match, in the form OpenAI's strict mode takes: every object
    closed (`additionalProperties: false`) with all its properties required (optional ones are nullable in
    pydantic's schema already or get a value), and no `default`. A free-form object (e.g. `dict`) stays
    open; `is_strict` then says strict mode is impossible."""
    return _closed(model.model_json_schema())


def _closed(node: Any) -> Any:
    if isinstance(node, list):
        return [_closed(n) for n in node]
    if not isinstance(node, dict):
        return node
    node = {k: _closed(v) for k, v in node.items() if k != "default"}
    if node.get("type") == "object" and "properties" in node:
        node.pop("description", None)  # a model's docstring speaks to developers, not to the model
        node["additionalProperties"] = False
        node["required"] = list(node["properties"])
    return node


def is_strict(schema: dict) -> bool:
    """Whether every object of `schema` is closed, as strict mode requires."""
    if isinstance(schema, list):
        return all(is_strict(n) for n in schema)
    if not isinstance(schema, dict):
        return True
    if schema.get("type") == "object" and schema.get("additionalProperties") is not False:
        return False
    return all(is_strict(v) for k, v in schema.items() if isinstance(v, (dict, list)) and k != "enum")


def response_format(mode: str, model: type[BaseModel], json_schema: dict | None = None) -> dict | None:
    """The `response_format` of a request in `mode` (a `CHAIN` entry; None for prompt-only).
    `json_object+schema` carries the schema as `schema`: llama.cpp's server constrains its output with it
    (also versions that know no `json_schema`); most other servers ignore the key."""
    if mode == "json_object":
        return {"type": "json_object"}
    if mode not in ("json_schema", "json_object+schema"):
        return None
    schema = copy.deepcopy(json_schema) if json_schema is not None else response_schema(model)
    if mode == "json_object+schema":
        return {"type": "json_object", "schema": schema}
    return {"type": "json_schema",
            "json_schema": {"name": model.__name__, "schema": schema, "strict": is_strict(schema)}}


# ---- reading replies -----------------------------------------------------------------------------------

_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)
_TOOL_TAG = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
# tool calls with the name outside the JSON: Llama 3.1's `<function=NAME>{...}</function>`, Mistral's
# `[TOOL_CALLS]NAME[ARGS]{...}`
_NAMED_CALLS = (re.compile(r"<function=([\w.-]+)>\s*(.*?)\s*(?:</function>|$)", re.DOTALL),
                re.compile(r"\[TOOL_CALLS\]\s*([\w.-]+)\s*\[ARGS\]\s*(.*)", re.DOTALL))


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
        except (ValueError, RecursionError):  # RecursionError: thousands of nested brackets
            continue
    raise ValueError("the reply contains no JSON object")


def text_tool_call(text: str) -> tuple[str, dict | str] | None:
    """`(name, arguments)` when a reply is a tool call written as text instead of an answer:
    `{"name": ..., "arguments": ...}` (or `parameters`, or OpenAI's `{"type": "function", "function": ...}`,
    also inside `{"tool_calls": [...]}`), bare, in a code fence or in `<tool_call>...</tool_call>` tags;
    `<function=NAME>{...}</function>`; `[TOOL_CALLS]NAME[ARGS]{...}`; else None."""
    for pattern in _NAMED_CALLS:
        found = pattern.search(text or "")
        if found:
            try:
                arguments = extract_json(found.group(2)) if found.group(2).strip() else {}
            except ValueError:
                arguments = found.group(2)
            return found.group(1), arguments if isinstance(arguments, (dict, str)) else found.group(2)
    values = []
    for inner in _TOOL_TAG.findall(text or ""):
        try:
            values.append(extract_json(inner))
        except ValueError:
            continue
    try:
        values.append(extract_json(text or ""))
    except ValueError:
        pass
    for value in values:
        for item in value if isinstance(value, list) else [value]:
            call = _as_call(item)
            if call:
                return call
    return None


def _as_call(value: Any) -> tuple[str, dict | str] | None:
    if not isinstance(value, dict):
        return None
    if isinstance(value.get("tool_calls"), list) and value["tool_calls"] and set(value) <= {"tool_calls", "role",
                                                                                         "content"}:
        value = value["tool_calls"][0]  # a whole assistant message written out
        if not isinstance(value, dict):
            return None
    if isinstance(value.get("function"), dict) and set(value) <= {"type", "function", "id"}:
        value = value["function"]
    key = "arguments" if "arguments" in value else "parameters" if "parameters" in value else None
    if key is None or not isinstance(value.get("name"), str) or not set(value) <= {"name", key, "type", "id"}:
        return None
    return (value["name"], value[key]) if isinstance(value[key], (dict, str)) else None


def parse_model(text: str, schema: type[T]) -> T:
    """Parse and validate a reply as `schema`; raises ValueError with a short, model-readable reason."""
    data = extract_json(text)
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '(root)'}: {e['msg']}" for e in exc.errors())
        raise ValueError(problems) from None


def shape_of(schema: dict) -> Any:
    """The shape of a reply for a JSON `schema`, with placeholders for values (`"<string>"`,
    `"<one of: A, B>"`): what a repair turn shows instead of an example, so nothing in it can be copied as
    memory (the content checks refuse placeholders)."""
    return _shape(schema, schema.get("$defs", {}))


def _shape(node: dict, defs: dict) -> Any:
    if "$ref" in node:
        return _shape(defs[node["$ref"].rsplit("/", 1)[-1]], defs)
    if node.get("enum"):
        values = [str(v) for v in node["enum"]]
        return f"<one of: {', '.join(values[:8])}{', ...' if len(values) > 8 else ''}>"
    options = node.get("anyOf") or ([{**node, "type": t} for t in node["type"]] if isinstance(node.get("type"), list)
                                    else None)
    if options:
        real = [n for n in options if n.get("type") != "null"]
        shape = _shape(real[0], defs) if real else None
        nullable = len(real) < len(options)
        return f"{shape[:-1]} or null>" if nullable and isinstance(shape, str) and shape.endswith(">") else shape
    kind = node.get("type")
    if kind == "object":
        return {name: _shape(prop, defs) for name, prop in node.get("properties", {}).items()}
    if kind == "array":
        return [_shape(node.get("items") or {}, defs)]
    return None if kind == "null" else f"<{kind or 'value'}>"


def repair_prompt(problem: str, shape: Any) -> str:
    """The repair turn: what was wrong, and the answer's shape with placeholders (not the raw schema, which
    small models echo back, and not an example, which they copy)."""
    return (
        f"Your previous answer could not be used: {problem}.\n"
        "Reply again with only one JSON object (no prose, no code fence) of this shape, each <...> replaced "
        "by your own value taken from the material above:\n"
        + json.dumps(shape, ensure_ascii=False)
    )
