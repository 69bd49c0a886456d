"""Who may use which workspace: access tokens and the grant a request carries.

`DREAMFLOW_API_TOKEN` is the admin token (every workspace, read-write, and Prefect's API). Tokens made with
`dreamflow token create` grant a set of workspaces, read-write or read-only; `$DREAMFLOW_HOME/tokens.json`
keeps only a SHA-256 of each (a token is printed once). Once a token exists the service requires a bearer
token on every request; without an admin token set, `token create` makes one in `$DREAMFLOW_HOME/admin-token`
(mode 0600) that this machine's CLI and jobs send. A workspace outside a grant behaves as if it did not exist.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from engine.config.settings import ADMIN_FILE, admin_token, dreamflow_home
from storage.errors import Forbidden, InvalidInput, NotFound

FILE = "tokens.json"
# what naming a workspace that does not exist, or one the caller may not use, answers (the same, naming nothing)
UNKNOWN_WORKSPACE = "no such workspace (`workspaces` lists the ones you may use)"
PREFIX = "dft_"  # tokens look like dft_<43 url-safe characters>, so a leaked one is easy to recognise


@dataclass(frozen=True)
class Grant:
    """What one request may do: `workspaces` None means every workspace (the admin, or a service without tokens)."""

    name: str
    workspaces: frozenset[str] | None = None
    read_only: bool = False

    @property
    def admin(self) -> bool:
        return self.workspaces is None and not self.read_only

    def sees(self, workspace: str) -> bool:
        return self.workspaces is None or workspace in self.workspaces

    def check(self, workspace: str, writes: bool) -> None:
        """NotFound for a workspace outside the grant (the same answer as for one that does not exist);
        Forbidden for a write with a read-only grant."""
        if not self.sees(workspace):
            raise NotFound(UNKNOWN_WORKSPACE)
        if writes and self.read_only:
            raise Forbidden(f"this token ({self.name}) may only read workspace {workspace!r}")


ADMIN = Grant("admin")


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _load(path: Path | None = None) -> list[dict]:
    path = path or dreamflow_home() / FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        raise InvalidInput(f"cannot read the token file {path}: {exc}") from None
    return [t for t in data.get("tokens", []) if isinstance(t, dict)] if isinstance(data, dict) else []


def _save(tokens: list[dict]) -> None:
    path = dreamflow_home() / FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump({"tokens": tokens}, out, indent=2)
    os.replace(tmp, path)


def create(name: str, workspaces: list[str], read_only: bool = False) -> str:
    """A new token granting `workspaces` (all registered names); returns the secret (shown once)."""
    from engine.config.registry import Registry, UNREGISTERED

    if not name or len(name) > 100:
        raise InvalidInput("a token needs a --name of 1-100 characters (e.g. the machine or person it is for)")
    if not workspaces:
        raise InvalidInput("a token needs at least one --workspace")
    registry = Registry.load()
    for ws in workspaces:
        if ws not in registry.entries and ws != UNREGISTERED:
            registry.get(ws)  # NotFound with the name
    tokens = _load()
    if any(t.get("name") == name for t in tokens):
        raise InvalidInput(f"a token named {name!r} exists: revoke it first or pick another --name")
    secret = PREFIX + secrets.token_urlsafe(32)
    tokens.append({"name": name, "sha256": _digest(secret), "workspaces": sorted(set(workspaces)),
                   "read_only": read_only, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    _save(tokens)
    ensure_admin_token()
    return secret


def first_token_changes() -> list[str]:
    """What the first token changed, for `token create` to say."""
    return ["This is the first token: every HTTP request now needs one ('Authorization: Bearer <token>'), a running "
            "service included (no restart needed), and the dashboard asks to sign in with a token.",
            f"This machine's admin token is in {dreamflow_home() / ADMIN_FILE} (mode 0600): the CLI, the jobs and the "
            "stdio MCP server here send it, so they keep working; paste it to sign in to the dashboard as admin."]


def listing() -> list[dict]:
    """The tokens without their hashes."""
    return [{k: v for k, v in t.items() if k != "sha256"} for t in _load()]


def revoke(name: str) -> dict:
    tokens = _load()
    kept = [t for t in tokens if t.get("name") != name]
    if len(kept) == len(tokens):
        raise NotFound(f"no token named {name!r}")
    _save(kept)
    return {"revoked": name}


def any_tokens() -> bool:
    return bool(_load())


def ensure_admin_token() -> None:
    """With tokens but no admin token, make one this machine's CLI and jobs use (mode 0600)."""
    if admin_token():
        return
    path = dreamflow_home() / ADMIN_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(PREFIX + secrets.token_urlsafe(32) + "\n")


class Tokens:
    """The token file as the service checks it: re-read when it changes, so `token create | revoke` take
    effect without a restart. `admin` is a fixed admin token; None follows this machine's (`DREAMFLOW_API_TOKEN`,
    else `$DREAMFLOW_HOME/admin-token`, re-read when it changes), so the admin token the first `token create`
    makes is taken by a running service at once and the local CLI, jobs and stdio MCP keep working."""

    def __init__(self, admin: str | None):
        self._fixed = admin
        self.admin = admin
        self._path = dreamflow_home() / FILE
        self._admin_path = dreamflow_home() / ADMIN_FILE
        self._stamp = None
        self._by_digest: dict[str, Grant] = {}

    @property
    def required(self) -> bool:
        """Whether requests must carry a token."""
        self._refresh()
        return bool(self.admin or self._by_digest)

    def grant(self, secret: str | None) -> Grant | None:
        """The grant of a bearer token, None when it is not valid. Without any token configured: the admin."""
        self._refresh()
        if not self.admin and not self._by_digest:
            return ADMIN
        if not secret:
            return None
        if self.admin and hmac.compare_digest(secret.encode(), self.admin.encode()):
            return ADMIN
        return self._by_digest.get(_digest(secret))

    def _refresh(self) -> None:
        stamp = (_stamp(self._path), None if self._fixed else _stamp(self._admin_path))
        if stamp == self._stamp:
            return
        self._stamp = stamp
        self.admin = self._fixed or admin_token()
        self._by_digest = {
            t["sha256"]: Grant(str(t.get("name")), frozenset(t.get("workspaces") or ()), bool(t.get("read_only")))
            for t in (_load(self._path) if stamp[0] else []) if isinstance(t.get("sha256"), str)
        }


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino
