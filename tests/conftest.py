"""Shared fixtures. Append fixtures here; keep area-specific helpers in their own tests/ modules."""

import os

# Quiet, offline defaults for every process the tests start (set before anything imports prefect).
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest

from storage.workspace import Workspace


@pytest.fixture
def ws(tmp_path) -> Workspace:
    """A fresh workspace with the standard layout."""
    return Workspace(tmp_path / "ws")
