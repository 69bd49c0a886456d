"""Every job, declared once: the memory jobs (Prefect flows) and the conversation turn.

A `Job` names the function that does the work; that function's signature is the only place of the job's
parameters, annotations and defaults (read from its source by engine/job_params.py, so nothing here imports
prefect). The declaration adds what the surfaces need besides: the CLI command, positional arguments and short
flags, help text per parameter where the shared `ops.PARAM_HELP` does not say what the job means, and the
parameters a surface does not offer. From it come the CLI job commands (dreamflow/cli/job_command.py), the
HTTP request models (`POST /flows/<job>`, `/turn`, `/proactive`), the MCP job tools, the deployments
(deployments/serve.py) and the jobs reference (docs/jobs-reference.md). Pure data: no prefect, click or
pydantic here.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Annotated, Any

from annotated_types import Ge, Le

from engine.job_params import REQUIRED, job_doc, job_params
from engine.ops import PARAM_HELP, Param
from storage.arguments import MAX_COUNT


Count = Annotated[int, Ge(0), Le(MAX_COUNT)]  # a job's `int`: days, units, nodes... as the operations' counts
_TYPES = {"str": str, "int": Count, "float": float, "bool": bool, "list": list, "dict": dict, "Any": Any}


def annotation_type(annotation: str) -> Any:
    """A job function's annotation as written (`str | None`, `list[dict]`, `int`) as a type; `int` is a `Count`."""
    return eval(annotation, {"__builtins__": {}}, _TYPES)  # noqa: S307: the project's own annotations, ast-read


@dataclass(frozen=True)
class Job:
    """How one job is exposed. `name` is the function (and the `/flows/<name>` route, the deployment's key)."""

    name: str
    module: str                 # dotted module of the function, e.g. flows.auto_dream
    command: str                # the CLI command
    summary: str                # one line: the CLI command's help, the deployment's and the reference's
    needs_llm: bool = False     # the job calls the LLM (it stops at once without DREAMFLOW_LLM_*)
    args: tuple[str, ...] = ()  # parameters taken positionally on the CLI, in order (a list: any number)
    short: dict[str, str] = field(default_factory=dict)  # parameter -> CLI short flag letter
    help: dict[str, str] = field(default_factory=dict)   # parameter -> help, where PARAM_HELP's is not the job's
    hidden: dict[str, tuple[str, ...]] = field(default_factory=dict)  # surface -> parameters it does not offer
    body: str | None = None     # a JSON parameter the CLI also reads from --file or stdin ('-')
    op: bool = False            # the CLI command is the generated operation `command`, run as this job when
                                # the service runs
    tool: str | None = None     # the MCP tool that starts a run of it (None: no tool)

    @property
    def doc(self) -> str:
        """The function's docstring."""
        return job_doc(self.module, self.name)

    def parameters(self, surface: str | None = None) -> tuple[Param, ...]:
        """The job's parameters in the function's order, as the operations' (`ops.Param`), without `workspace`
        (a surface names the workspace its own way, never by a folder the caller gives) and without those
        `surface` ("cli", "http", "mcp") hides."""
        hidden = ("workspace", *self.hidden.get(surface, ())) if surface else ("workspace",)
        return tuple(Param(p.name, annotation_type(p.annotation),
                           inspect.Parameter.empty if p.default is REQUIRED else p.default,
                           self.help.get(p.name, PARAM_HELP.get(p.name, "")))
                     for p in job_params(self.module, self.name).values() if p.name not in hidden)

    def bind(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The arguments of a call of the job (as its function takes them, `workspace` aside) by name: a wrong
        or missing one is a TypeError as for any call."""
        signature = inspect.Signature([inspect.Parameter(p.name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                         default=p.default) for p in self.parameters()])
        return dict(signature.bind(*args, **kwargs).arguments)

    def defaults(self) -> dict[str, Any]:
        """`{parameter: default}` of the parameters that have one (the function's)."""
        return {p.name: p.default for p in self.parameters() if not p.required}


JOBS: dict[str, Job] = {job.name: job for job in (
    Job("auto_memory", "flows.auto_memory", "auto-memory",
        "Summarise a conversation's not-yet-summarised messages into its daily card.",
        needs_llm=True, tool="auto_memory", short={"session_id": "s", "messages": "m"}, body="messages",
        hidden={"mcp": ("messages",)},
        help={"date": "Day of the card (YYYY-MM-DD); default: the latest message's day, else today",
              "hint": "A hint for the summary (what matters to you)"}),
    Job("auto_resource", "flows.auto_resource", "auto-resource",
        "Write, update or remove the daily card of a resource file under resource/[YYYY-MM-DD/].",
        needs_llm=True, args=("path",), help={"path": "The resource file, under resource/[YYYY-MM-DD/]"}),
    Job("auto_dream", "flows.auto_dream", "dream",
        "Consolidate recent daily cards into digest nodes and write the day's interests.",
        needs_llm=True, tool="dream",
        help={"date": "Last day of the window (YYYY-MM-DD); default today",
              "hint": "A hint for what to consolidate (its subjects first)"}),
    Job("proactive", "flows.proactive", "proactive",
        "The topics to bring up on a day, from daily/<date>/interests.yaml (written by dream).",
        help={"date": "Day (YYYY-MM-DD or `today`); default today",
              "include_content": "Include the text of each topic's files"}),
    Job("reindex", "flows.maintenance", "reindex", "Rebuild the whole index from the files.", op=True),
    Job("optimize", "flows.maintenance", "optimize",
        "Index maintenance: catch up with changed files, then compact the DuckDB index.", op=True),
    Job("doctor", "flows.governance", "doctor",
        "Check the memory graph: broken links and anchors, orphans, missing sources, near-duplicates, bad "
        "frontmatter, index drift.",
        help={"fix": "Re-index drifted files and retarget links to moved files first"}),
    Job("link_mine", "flows.governance", "link-mine",
        "Weave links to related nodes into digest nodes changed since the last run (or given paths).",
        needs_llm=True, args=("paths",),
        help={"paths": "Digest nodes to weave links into (default: those changed since the last run)",
              "max_nodes": "Most nodes per run (the rest wait)", "candidates": "Candidate nodes shown per node"}),
    Job("merge", "flows.governance", "merge",
        "Fold near-duplicate digest nodes (or given [survivor, victim] pairs) into their survivors: sources and "
        "links united, links to the victim retargeted, the victim deleted.",
        needs_llm=True, hidden={"cli": ("pairs", "dup_threshold")},  # the CLI takes SURVIVOR VICTIM
        help={"pairs": "[survivor, victim] pairs to merge (default: the doctor's near-duplicates)",
              "max_pairs": "Most pairs from the doctor per run"}),
    Job("split", "flows.governance", "split",
        "Break overlong digest nodes (or given paths) into focused nodes that link to each other.",
        needs_llm=True, args=("paths",), hidden={"cli": ("overlong_lines",)},
        help={"paths": "Digest nodes to split (default: the doctor's overlong nodes)",
              "max_nodes": "Most nodes per run", "max_parts": "Most parts per node"}),
    Job("archive", "flows.governance", "archive",
        "Move stale and expired digest nodes (or given paths) to digest/archive/, links retargeted.",
        args=("paths",),
        help={"paths": "Digest nodes to archive (default: the doctor's stale and expired nodes)",
              "stale_days": "Without paths: archive nodes nobody links to, not updated for this many days"}),
)}

# The conversation turn: not a flow, but the request every surface takes (`dreamflow turn`, `POST /turn`, the
# MCP `turn` tool), declared the same way from `engine.turns.record_turn`.
TURN = Job("record_turn", "engine.turns", "turn",
           "Record a conversation turn; every N turns (or with compact) auto_memory summarises the session.",
           tool="turn", body="messages")
