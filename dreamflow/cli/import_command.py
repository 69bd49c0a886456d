"""`dreamflow import-reme DIR`: bring a ReMe workspace over (engine/memory/reme_import.py). CLI only: DIR is a folder
on this machine, so no HTTP route or agent tool offers it."""

from __future__ import annotations

import json

import click

from dreamflow.cli.common import fail


@click.command("import-reme")
@click.argument("source", type=click.Path(file_okay=False, exists=True))
@click.option("--overwrite", is_flag=True, help="Replace workspace files whose content differs (default: report them).")
@click.option("--max-file-bytes", type=click.IntRange(min=0), default=None,
              help="Skip files larger than this (default: DREAMFLOW_MAX_BODY_BYTES, 32 MiB).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_obj
def import_reme(obj, source: str, overwrite: bool, max_file_bytes: int | None, as_json: bool) -> None:
    """Copy the ReMe workspace SOURCE into this workspace and index it; SOURCE is left unchanged.

    Files are copied as they are (modification times kept), except ReMe's metadata/ (its own indexes) and
    mem_session/ (agent runtime state). What the file tools would refuse (names that are not UTF-8, contain a
    backslash or break on other systems, METADATA/ in any case), symlinks, special files and files over
    --max-file-bytes are skipped and listed; the rest comes over. Day pages written by ReMe get Dreamflow's card
    list in place of their <!-- notes:auto --> block; tags and memory_tags are indexed; sessions that a daily
    card names are marked as summarised. A workspace file with other content is a conflict: listed and kept
    unless --overwrite.
    """
    from engine.memory.reme_import import import_reme as run_import
    from storage.errors import DreamflowError
    from storage.files.workspace import Workspace

    try:
        result = run_import(obj.memory(), Workspace(obj.workspace), source, overwrite=overwrite,
                            max_bytes=max_file_bytes)
    except DreamflowError as exc:
        fail(exc, as_json)
    if as_json:
        click.echo(json.dumps(result, ensure_ascii=False, indent=2))
        return
    click.echo(f"imported {result['copied']} files from {result['source']} ({result['unchanged']} already there), "
               f"{len(result['day_pages'])} day pages converted, {len(result['sessions'])} sessions marked summarised, "
               f"{result['skipped_count']} entries skipped")
    for rel in result["conflicts"]:
        click.echo(f"conflict (kept the workspace's version): {rel}")
    for row in result["skipped"]:
        click.echo(f"skipped {row['path']}: {row['reason']}")
    if result["skipped_count"] > len(result["skipped"]):
        click.echo(f"... and {result['skipped_count'] - len(result['skipped'])} more skipped entries")
