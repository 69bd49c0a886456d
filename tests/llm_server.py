"""A real OpenAI chat-completions compatible HTTP server on 127.0.0.1 that tests script.

Every test talks to it through the real `openai` client. Script replies in three ways, checked in this order:

- `server.on(match, *replies)`: replies for requests whose message text contains `match` (a string) or for
  which `match(request_body)` is true, used in order (for concurrent calls, e.g. mapped dream units);
- `server.reply(...)` / `server.reply_json(obj)`: a FIFO queue for the rest;
- `server.responder = fn(request_body) -> Reply | None`: computes a reply (benchmarks, catch-alls).

`server.refuse(match, status=400)` makes every request matching `match(request_body)` fail with that HTTP status
before any scripted reply is used (and without using one): e.g. an endpoint that knows no `json_schema`.

`POST /v1/embeddings` is answered by `server.embedder = fn(texts) -> list[vector]` (HTTP 500 while it is None
or when it raises), so the real `openai` embeddings path runs too.

A request nothing answers gets HTTP 500 "no scripted reply", so a test fails loudly rather than hanging.
Every request body is recorded in `server.requests`.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable


@dataclass
class Reply:
    """One scripted answer: text `content`, after `delay` seconds, or once `held` is set (at most 30 s: a test
    answers when what it waits for has happened, however slow the machine); `status` != 200 is an HTTP error;
    `raw` replaces the JSON body entirely (e.g. a broken body); `usage` overrides token counts; `finish_reason`
    overrides "stop" (e.g. "length": cut at max_tokens)."""

    content: str | None = None
    delay: float = 0.0
    held: threading.Event | None = None
    status: int = 200
    raw: bytes | None = None
    usage: dict | None = None
    finish_reason: str | None = None


def text_of(body: dict) -> str:
    """All message text of a request, for matching."""
    parts = []
    for m in body.get("messages", []):
        content = m.get("content")
        if isinstance(content, list):
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        parts.append(str(content or ""))
    return "\n".join(parts)


class LLMServer:
    """The scripted server; start with `start()`, stop with `stop()`; `reset()` between tests."""

    model = "scripted-model"

    def __init__(self):
        self._lock = threading.Lock()
        self._queue: list[Reply] = []
        self._routes: list[tuple[Callable[[dict], bool], list[Reply]]] = []
        self.responder: Callable[[dict], Reply | None] | None = None
        self.embedder: Callable[[list[str]], list[list[float]]] | None = None
        self.requests: list[dict] = []
        self._refusals: list[tuple[Callable[[dict], bool], int, str]] = []
        self._httpd: ThreadingHTTPServer | None = None

    # -- scripting -----------------------------------------------------------------------------------------
    def reply(self, content: str | None = None, **kwargs) -> LLMServer:
        """Queue a text reply (see `Reply` for delay/status/raw/usage)."""
        with self._lock:
            self._queue.append(Reply(content=content, **kwargs))
        return self

    def reply_json(self, obj: Any, **kwargs) -> LLMServer:
        """Queue a reply whose text is `obj` as JSON."""
        return self.reply(json.dumps(obj, ensure_ascii=False), **kwargs)

    def on(self, match: str | Callable[[dict], bool], *replies: Reply) -> LLMServer:
        """Answer requests matching `match` with `replies`, in order."""
        pred = match if callable(match) else (lambda body, m=match: m in text_of(body))
        with self._lock:
            self._routes.append((pred, list(replies)))
        return self

    def refuse(self, match: Callable[[dict], bool], status: int = 400,
               message: str = "unsupported request") -> LLMServer:
        """Answer every request for which `match(body)` is true with HTTP `status` (until `reset`)."""
        with self._lock:
            self._refusals.append((match, status, message))
        return self

    def reset(self) -> None:
        with self._lock:
            self._queue.clear()
            self._routes.clear()
            self._refusals.clear()
            self.requests.clear()
            self.responder = None
            self.embedder = None

    def pending(self) -> int:
        """Scripted replies not consumed yet."""
        with self._lock:
            return len(self._queue) + sum(len(r) for _, r in self._routes)

    def _next(self, body: dict) -> Reply | None:
        with self._lock:
            self.requests.append(body)
            for pred, status, message in self._refusals:
                if pred(body):
                    return Reply(content=message, status=status)
            for pred, replies in self._routes:
                if replies and pred(body):
                    return replies.pop(0)
            if self._queue:
                return self._queue.pop(0)
            responder = self.responder
        return responder(body) if responder else None

    def _embeddings(self, body: dict) -> tuple[int, dict]:
        with self._lock:
            self.requests.append(body)
            embedder = self.embedder
        texts = body.get("input")
        texts = [texts] if isinstance(texts, str) else list(texts or [])
        if embedder is None:
            return 500, {"error": {"message": "no scripted embedder"}}
        try:
            vectors = embedder(texts)
        except Exception as exc:  # noqa: BLE001 - a scripted failure becomes an HTTP error
            return 500, {"error": {"message": f"embedder failed: {exc}"}}
        data = [{"object": "embedding", "index": i, "embedding": list(map(float, v))} for i, v in enumerate(vectors)]
        return 200, {"object": "list", "data": data, "model": body.get("model", self.model),
                     "usage": {"prompt_tokens": sum(len(t) // 4 for t in texts), "total_tokens": 0}}

    # -- serving -------------------------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> LLMServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep test output clean
                pass

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except json.JSONDecodeError:
                    return self._send(400, {"error": {"message": "request body is not JSON"}})
                if self.path.rstrip("/").endswith("/embeddings"):
                    return self._send(*server._embeddings(body))
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    return self._send(404, {"error": {"message": f"unknown route {self.path}"}})
                reply = server._next(body)
                if reply is None:
                    return self._send(500, {"error": {"message": "no scripted reply for this request"}})
                if reply.held is not None:
                    reply.held.wait(30)
                if reply.delay:
                    time.sleep(reply.delay)
                if reply.raw is not None:
                    return self._send(reply.status, reply.raw)
                if reply.status != 200:
                    return self._send(reply.status, {"error": {"message": reply.content or "scripted error"}})
                self._send(200, completion(body, reply))

            def _send(self, status: int, payload: dict | bytes):
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, daemon=True, name="llm-server").start()
        return self

    def stop(self) -> None:
        if self._httpd:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None


def completion(body: dict, reply: Reply) -> dict:
    """A chat.completion object for `reply`, with usage counted roughly as characters / 4."""
    prompt_tokens = max(1, len(text_of(body)) // 4)
    completion_tokens = max(1, len(reply.content or "") // 4)
    usage = reply.usage or {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                            "total_tokens": prompt_tokens + completion_tokens}
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", LLMServer.model),
        "choices": [{"index": 0, "message": message,
                     "finish_reason": reply.finish_reason or "stop"}],
        "usage": usage,
    }


def format_type(body: dict) -> str | None:
    """The `response_format` type of a request (None without one)."""
    return (body.get("response_format") or {}).get("type")


def json_reply(obj: Any, **kwargs) -> Reply:
    """A reply whose text is `obj` as JSON."""
    return Reply(content=json.dumps(obj, ensure_ascii=False), **kwargs)


def numbered(body: dict) -> list[tuple[int, str]]:
    """The numbered messages or blocks a facts request shows: `(number, text)`, speaker and time left out."""
    shown = re.findall(r"^\[(\d+)\] (?:(?:user|assistant)(?:, [\d-]+ [\d:]+)?: )?(.+)$",
                       body["messages"][1]["content"], re.M)
    return [(int(n), text) for n, text in shown]


def fact(text, about="user", kind="fact", source=(1,)) -> dict:
    """One fact as the facts schema asks for it."""
    return {"text": text, "about": about, "kind": kind, "source": list(source)}


def answer_by_message(llm, title: str, *scripted: tuple) -> None:
    """Answer every facts request turn by turn: each scripted `(said, fact...)` fact where the message that
    says `said` is in the turn, citing that message's number (`+ shift`: a wrong number, as small models give)."""
    def respond(body: dict):
        if "messages" not in body:
            return None
        lines = {text: n for n, text in numbered(body)}
        found = [{**f, "source": [lines[text] + shift]} for said, f, shift in (s if len(s) == 3 else (*s, 0)
                                                                               for s in scripted)
                 for text in lines if said in text]
        return json_reply({"title": title, "facts": found})

    llm.responder = respond


def answer_each_item(server: LLMServer, title: str) -> None:
    """Answer every facts request with one fact per numbered message or block: its own words, citing it."""
    def respond(body: dict):
        if "messages" not in body:
            return None
        return json_reply({"title": title, "facts": [fact(text, source=(n,)) for n, text in numbered(body)]})

    server.responder = respond


def copy_shown(body: dict) -> Reply:
    """What a small model does with a repair turn (a `responder`): answer with the JSON object the turn shows,
    copied (the last `{...}` line of its last message)."""
    shown = body["messages"][-1]["content"]
    return Reply(content=shown[shown.rindex("\n{") + 1:] if "\n{" in shown else shown)


# What the repair turns showed before they showed only the answer's shape: the 7-day run's cards and nodes.
FORMER_EXAMPLES = {
    "card": {"name": "Piano lessons for Sam", "description": "When Sam's lessons are.",
             "content": "# Piano lessons\n\n- Sam has lessons on Tuesdays."},
    "decision": {"action": "CREATE", "target": None, "name": "Sam's piano lessons",
                 "description": "When and where Sam learns the piano.",
                 "content": "Sam takes piano lessons on Tuesdays.\n\n## Sources\n\n- ..."},
    "merged": {"name": "Piano lessons", "description": "Sam's lessons.",
               "content": "Sam has lessons on Tuesdays.\n\n## Sources\n\n- ..."},
}
PROSE = "Sure! Here is a summary of what was said, with the important points highlighted for you."


def misbehave(server: LLMServer, match: str, copied: str | None = None) -> None:
    """Script the small model of the 7-day run for requests matching `match`: prose first, then the repair
    turn's example copied: `copied` names one of `FORMER_EXAMPLES` (what was shown before), None copies what
    the repair turn shows now."""
    if copied is None:
        server.on(match, Reply(content=PROSE))
        server.responder = copy_shown
    else:
        example = json.dumps(FORMER_EXAMPLES[copied])
        server.on(match, Reply(content=PROSE), Reply(content=example), Reply(content=example))
