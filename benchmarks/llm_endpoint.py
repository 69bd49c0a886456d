"""The LLM benchmarks' set-up: a temporary home with Prefect configured, and the endpoint they run against."""

from __future__ import annotations

import os
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator


@contextmanager
def endpoint(prefix: str, responder: Callable | None = None, model: str = "scripted-model") -> Iterator[tuple]:
    """`(home, settings)`: a fresh temporary home (`PREFECT_HOME` inside it, keyword search only unless set)
    and the configured `DREAMFLOW_LLM_*` endpoint, or with `responder` tests/llm_server.py answering with it
    as `model`. Exits with a message when no endpoint is configured; the scripted server stops on exit."""
    home = Path(tempfile.mkdtemp(prefix=prefix))
    os.environ["PREFECT_HOME"] = str(home / "prefect")
    os.environ.setdefault("DREAMFLOW_EMBEDDER", "none")
    from engine.config import prefect_env

    prefect_env.configure()
    server = None
    if responder is not None:
        from llm_server import LLMServer

        server = LLMServer().start()
        server.responder = responder
        os.environ.update(DREAMFLOW_LLM_BASE_URL=server.base_url, DREAMFLOW_LLM_MODEL=model,
                          DREAMFLOW_LLM_MAX_RETRIES="0")
    from engine.config.settings import Settings

    settings = Settings()
    if not settings.llm_configured:
        sys.exit("no endpoint: set DREAMFLOW_LLM_BASE_URL and DREAMFLOW_LLM_MODEL, or pass --scripted")
    try:
        yield home, settings
    finally:
        if server is not None:
            server.stop()
