"""Quiet, offline Prefect defaults, applied before `prefect` is imported (Prefect reads them at import).

Every entry point that runs flows (CLI flow commands, the service, tests, benchmarks) calls `configure()`
first. Values already in the environment win, so users can still point Prefect elsewhere. The comment beside
each value says why it is set and what was measured (Prefect 3.9, 2 cores).
"""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

from engine.config.settings import dreamflow_home
from storage.errors import DreamflowError

AUTH_USER = "dreamflow"  # user part of the Prefect server's basic-auth string when DREAMFLOW_API_TOKEN is set

DEFAULTS = {
    # Nothing phones home: client analytics and the server's telemetry.
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    # INFO logs still reach the API (the UI shows them); the console only gets warnings and errors.
    "PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL": "WARNING",
    # Shutdown tracebacks of the temporary server's services are logged at ERROR: not for users' eyes.
    "PREFECT_SERVER_LOGGING_LEVEL": "CRITICAL",
    "PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW": "ignore",
    # Fewer SQLite 'database is locked' stalls (HTTP 503, retried after 2-7 s; PrefectHQ/prefect#18934): a
    # 100-task benchmark took 52 s instead of 98-105 s with these, and met 1 retry instead of 15.
    "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_BATCH_SIZE": "500",
    "PREFECT_SERVER_SERVICES_EVENT_PERSISTER_BATCH_SIZE": "500",
    # A fresh temporary server needs ~22 s on 2 busy cores; Prefect's default wait is 20 s.
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
}


def prefect_home() -> str:
    """Where Prefect keeps its database: `<dreamflow home>/prefect` (a flow run's persisted results go to its
    workspace instead: engine.access.job_workspace.keep_results_in)."""
    return str(dreamflow_home() / "prefect")


def configure() -> None:
    """Set the quiet offline defaults (without overriding the environment) and silence Prefect's
    `EventsWorker` exit chatter, which logs on the root hierarchy outside Prefect's logging config."""
    os.environ.setdefault("PREFECT_HOME", prefect_home())
    Path(os.environ["PREFECT_HOME"]).expanduser().mkdir(parents=True, exist_ok=True)  # Prefect makes one level only
    for key, value in DEFAULTS.items():
        os.environ.setdefault(key, value)
    logging.getLogger("EventsWorker").setLevel(logging.ERROR)
    for name in ("prefect.flow_runs", "prefect.task_runs"):
        runs = logging.getLogger(name)
        if not any(isinstance(f, ExpectedFailureFilter) for f in runs.filters):
            runs.addFilter(ExpectedFailureFilter())


class ExpectedFailureFilter(logging.Filter):
    """Keeps the run logs of an expected failure short (the UI shows them): a `DreamflowError` (the LLM
    unreachable or its answer unusable, bad input, a missing file, units that failed and will be retried) is
    logged as its message without a traceback, and Prefect's "Engine execution exited with unexpected
    exception" line for it is dropped (the run's state message says what failed). Any other exception is
    unexpected and keeps its traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, DreamflowError):
            return True
        if record.getMessage().startswith("Engine execution exited"):
            return False
        record.exc_info = record.exc_text = None
        return True


def auth_string(token: str) -> str:
    """Basic-auth credentials (`user:password`) of the Prefect server a service with `DREAMFLOW_API_TOKEN`
    starts: `dreamflow:<token>`. The server gets them as PREFECT_SERVER_API_AUTH_STRING, its clients (runner,
    flow runs, CLI, workers) as PREFECT_API_AUTH_STRING, and the Prefect UI asks for them at login."""
    return f"{AUTH_USER}:{token}"


@contextmanager
def interactive_runs():
    """Settings for flows run in the calling process (CLI, tests, benchmarks): no flow heartbeat.

    Each sync flow otherwise waits ~1 s at its end for the heartbeat thread; heartbeats only matter for
    detecting crashed runs of deployments (the service's runner keeps them, deployments/runner.py).
    """
    configure()
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    with temporary_settings({PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        yield


def client():
    """A synchronous Prefect client (a context manager) of the API this process is pointed at. The clients share
    one TLS context: Prefect makes a new one for every client (certifi's ~150 certificates parsed, ~19 ms of CPU),
    which was a fifth of a running service's CPU as its status, runner and launches asked Prefect."""
    from prefect import get_client

    return get_client(sync_client=True, httpx_settings={"verify": _tls_context()})


@lru_cache(maxsize=1)
def _tls_context():
    """The TLS context Prefect's client makes for itself (PREFECT_API_TLS_INSECURE_SKIP_VERIFY, else
    PREFECT_API_SSL_CERT_FILE or certifi's bundle), made once per process."""
    import ssl

    import certifi
    from prefect.settings import PREFECT_API_SSL_CERT_FILE, PREFECT_API_TLS_INSECURE_SKIP_VERIFY

    if PREFECT_API_TLS_INSECURE_SKIP_VERIFY.value():
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        return context
    return ssl.create_default_context(cafile=PREFECT_API_SSL_CERT_FILE.value() or certifi.where())


def run_logger() -> logging.Logger:
    """Prefect's logger of the current run (shown in the UI), else a plain one (outside runs)."""
    from prefect import get_run_logger
    from prefect.exceptions import MissingContextError

    try:
        return get_run_logger()
    except MissingContextError:
        return logging.getLogger("dreamflow.tasks")
