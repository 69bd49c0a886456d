"""`dreamflow workspace add | list | remove | default` and `dreamflow token create | list | revoke`.

Both edit files under `$DREAMFLOW_HOME` (engine/config/registry.py, engine/config/grants.py); a running service picks the
changes up without a restart. Nothing here deletes a workspace's files.
"""

from __future__ import annotations

import json

import click

from dreamflow.cli.common import fail
from engine.config import grants
from engine.config.registry import Registry
from engine.config.settings import admin_token
from storage.errors import DreamflowError


def emit(result, as_json: bool, text: str) -> None:
    click.echo(json.dumps(result, indent=2, ensure_ascii=False) if as_json else text)


@click.group("workspace")
def workspace() -> None:
    """Name workspaces (one folder and one index each) so one service serves them all."""


@workspace.command("add")
@click.argument("name")
@click.argument("folder", type=click.Path(file_okay=False))
@click.option("--reads", multiple=True, metavar="NAME",
              help="A workspace this one's searches also read, e.g. personal (repeatable).")
@click.option("--folder", "folders", multiple=True, metavar="DIR",
              help="Agent sessions whose working folder is under DIR use this workspace (repeatable).")
@click.option("--timezone", default=None, help="Timezone of its days and schedules, where it differs.")
@click.option("--dream-cron", default=None, help="Its nightly dream schedule, where it differs.")
@click.option("--optimize-cron", default=None, help="Its nightly optimize schedule, where it differs.")
@click.option("--default", "make_default", is_flag=True, help="Make it what unscoped calls use.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def add_command(name, folder, reads, folders, timezone, dream_cron, optimize_cron, make_default, as_json):
    """Register NAME for FOLDER (made now if missing), or update it."""
    try:
        registry = Registry.load()
        values = {"timezone": timezone, "dream_cron": dream_cron, "optimize_cron": optimize_cron}
        old = registry.entries.get(name)
        settings = {**(old.settings if old else {}), **{k: v for k, v in values.items() if v}}
        entry = registry.add(name, folder, list(reads) or (old.reads if old else []),
                             [str(f) for f in (folders or (old.folders if old else []))], settings)
        if make_default:
            registry.default = name
        registry.save()
    except DreamflowError as exc:
        fail(exc, as_json)
    emit({"name": name, **entry.as_yaml(), "default": registry.default == name}, as_json,
         f"Workspace {name} -> {entry.path}" + (f" (reads {', '.join(entry.reads)})" if entry.reads else "")
         + f"\nRegistry  {registry.path}")


@workspace.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the workspaces as JSON.")
def list_command(as_json):
    """The registered workspaces: name, folder, what they read, which is the default."""
    try:
        registry = Registry.load()
    except DreamflowError as exc:
        fail(exc, as_json)
    rows = [{"name": e.name, **e.as_yaml(), "default": registry.default == e.name}
            for e in registry.entries.values()]
    lines = [f"{'*' if r['default'] else ' '} {r['name']:<20} {r['path']}"
             + (f"   reads {', '.join(r['reads'])}" if r.get("reads") else "") for r in rows]
    emit(rows, as_json, "\n".join(lines + [f"Registry  {registry.path}"]) if rows
         else f"No workspaces registered (registry: {registry.path}); add one with `dreamflow workspace add`.")


@workspace.command("remove")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def remove_command(name, as_json):
    """Forget NAME (its folder and files stay where they are)."""
    try:
        registry = Registry.load()
        entry = registry.remove(name)
        registry.save()
    except DreamflowError as exc:
        fail(exc, as_json)
    emit({"removed": name, "path": str(entry.path)}, as_json,
         f"Removed workspace {name}; its files stay in {entry.path}")


@workspace.command("default")
@click.argument("name")
def default_command(name):
    """Make NAME the workspace unscoped calls (and commands without --workspace) use."""
    try:
        registry = Registry.load()
        registry.get(name)
        registry.default = name
        registry.save()
    except DreamflowError as exc:
        fail(exc)
    click.echo(f"Default workspace: {name}")


@click.group("token")
def token() -> None:
    """Access tokens granting a set of workspaces, read-write or read-only."""


@token.command("create")
@click.option("--name", required=True, help="Who or what the token is for, e.g. laptop.")
@click.option("--workspace", "workspaces", multiple=True, required=True, metavar="NAME",
              help="A workspace it grants (repeatable).")
@click.option("--read-only", is_flag=True, help="It may search and read, never change anything.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def create_command(name, workspaces, read_only, as_json):
    """Make a token; it is printed once (only its hash is kept). The first one makes HTTP need a token (a
    running service takes it at once) and, without DREAMFLOW_API_TOKEN, an admin token this machine sends."""
    try:
        first = not grants.any_tokens() and not admin_token()
        secret = grants.create(name, list(workspaces), read_only)
    except DreamflowError as exc:
        fail(exc, as_json)
    changed = grants.first_token_changes() if first else []
    emit({"name": name, "token": secret, "workspaces": sorted(set(workspaces)), "read_only": read_only,
          "changed": changed},
         as_json, f"{secret}\nToken {name}: {'read-only' if read_only else 'read-write'} on "
         f"{', '.join(sorted(set(workspaces)))}. Shown once: keep it now. Send it as "
         "'Authorization: Bearer <token>' (or DREAMFLOW_API_TOKEN for the CLI)."
         + "".join(f"\n{line}" for line in changed))


@token.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the tokens as JSON.")
def token_list_command(as_json):
    """The tokens (names and grants; never the secrets)."""
    rows = grants.listing()
    emit(rows, as_json, "\n".join(
        f"{t['name']:<20} {'read-only ' if t.get('read_only') else 'read-write'} {', '.join(t['workspaces'])}"
        f"   created {t.get('created')}" for t in rows) or "No tokens.")


@token.command("revoke")
@click.argument("name")
def revoke_command(name):
    """Revoke the token named NAME at once (a running service re-reads the file)."""
    try:
        grants.revoke(name)
    except DreamflowError as exc:
        fail(exc)
    click.echo(f"Revoked token {name}")
