"""Finding memory text in folders, also inside the results Prefect persists (tests of where results live)."""

import base64
import json
from pathlib import Path


def holding(folder, needle: str) -> list[str]:
    """Files under `folder` holding `needle`, as written or inside a persisted Prefect result: a record (JSON
    whose `result` is a base64 pickle, a task's) or a bare base64 pickle (a flow's)."""
    found = []
    for path in (p for p in Path(folder).rglob("*") if p.is_file()):
        data = path.read_bytes()
        blobs = [data]
        try:
            blobs.append(base64.b64decode(json.loads(data)["result"]))
        except Exception:  # not a result record
            try:
                blobs.append(base64.b64decode(data))
            except ValueError:
                pass
        if any(needle.encode() in blob for blob in blobs):
            found.append(str(path))
    return found
