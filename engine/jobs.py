"""Every job, declared once: the memory jobs (Prefect flows) and the conversation turn.

A job's parameters are a typed request model here (a dataclass per job: each field's type, constraints,
default, help and the surfaces that offer it); the job's function (e.g. flows/auto_dream.py) takes the same
parameters, plus `workspace` (tests/test_job_params.py holds the two equal through the function's real
signature). The `Job` declaration adds what the surfaces need besides: the CLI command, positional arguments
and short flags. From it come the CLI job commands (dreamflow/cli/job_command.py), the HTTP request models
(`POST /flows/<job>`, `/turn`, `/proactive`), the MCP job tools, the deployments (deployments/serve.py) and the
jobs reference (docs/jobs-reference.md). Pure data: no prefect, click or pydantic here.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from dataclasses import dataclass, field
from typing import Annotated, Any

from engine.ops import PARAM_HELP, Param
from storage.arguments import OVERLONG_LINES, STALE_DAYS, Count

SURFACES = ("cli", "http", "mcp")


@dataclass(frozen=True)
class Help:
    """Field metadata: the field's help, where the shared `ops.PARAM_HELP` does not say what the job means."""

    text: str


@dataclass(frozen=True)
class Only:
    """Field metadata: the surfaces that offer the field; the others leave it at its default."""

    surfaces: tuple[str, ...]


# ---- the request models (the parameters of each job's function, `workspace` aside) -------------------------

@dataclass
class AutoMemoryRequest:
    session_id: str
    messages: Annotated[list[dict] | None, Only(("cli", "http"))] = None
    date: Annotated[str | None, Help("Day of the card (YYYY-MM-DD); default: the latest message's day, else "
                                     "today")] = None
    hint: Annotated[str | None, Help("A hint for the summary (what matters to you)")] = None


@dataclass
class AutoResourceRequest:
    path: Annotated[str, Help("The resource file, under resource/[YYYY-MM-DD/]")]


@dataclass
class AutoDreamRequest:
    date: Annotated[str | None, Help("Last day of the window (YYYY-MM-DD); default today")] = None
    hint: Annotated[str | None, Help("A hint for what to consolidate (its subjects first)")] = None
    scan_days: Count = 2
    max_units: Count = 5
    topic_count: Count = 3
    topic_diversity_days: Count = 7


@dataclass
class ProactiveRequest:
    date: Annotated[str | None, Help("Day (YYYY-MM-DD or `today`); default today")] = None
    include_content: Annotated[bool, Help("Include the text of each topic's files")] = False


@dataclass
class NoParameters:
    """A job that takes nothing but its workspace."""


@dataclass
class DoctorRequest:
    fix: Annotated[bool, Help("Re-index drifted files and retarget links to moved files first")] = False
    dup_threshold: float | None = None
    stale_days: Count = STALE_DAYS
    overlong_lines: Count = OVERLONG_LINES


@dataclass
class LinkMineRequest:
    paths: Annotated[list[str] | None, Help("Digest nodes to weave links into (default: those changed since the "
                                            "last run)")] = None
    max_nodes: Annotated[Count, Help("Most nodes per run (the rest wait)")] = 20
    candidates: Annotated[Count, Help("Candidate nodes shown per node")] = 8


@dataclass
class MergeRequest:
    # the CLI takes SURVIVOR VICTIM instead of pairs, and no dup_threshold
    pairs: Annotated[list[list[str]] | None, Only(("http", "mcp")),
                     Help("[survivor, victim] pairs to merge (default: the doctor's near-duplicates)")] = None
    max_pairs: Annotated[Count, Help("Most pairs from the doctor per run")] = 5
    dup_threshold: Annotated[float | None, Only(("http", "mcp"))] = None


@dataclass
class SplitRequest:
    paths: Annotated[list[str] | None, Help("Digest nodes to split (default: the doctor's overlong nodes)")] = None
    max_nodes: Annotated[Count, Help("Most nodes per run")] = 3
    max_parts: Annotated[Count, Help("Most parts per node")] = 4
    overlong_lines: Annotated[Count, Only(("http", "mcp"))] = OVERLONG_LINES


@dataclass
class ArchiveRequest:
    paths: Annotated[list[str] | None, Help("Digest nodes to archive (default: the doctor's stale and expired "
                                            "nodes)")] = None
    stale_days: Annotated[Count, Help("Without paths: archive nodes nobody links to, not updated for this many "
                                      "days")] = STALE_DAYS


@dataclass
class TurnRequest:
    """One conversation turn of a session."""

    session_id: str
    messages: list[dict] | None = None
    compact: bool = False
    turn_id: str | None = None


# ---- the jobs ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Job:
    """How one job is exposed. `name` is the function (and the `/flows/<name>` route, the deployment's key)."""

    name: str
    module: str                 # dotted module of the function, e.g. flows.auto_dream
    command: str                # the CLI command
    summary: str                # one line: the CLI command's help, the deployment's and the reference's
    request: type               # the request model: the function's parameters, `workspace` aside
    needs_llm: bool = False     # the job calls the LLM (it stops at once without DREAMFLOW_LLM_*)
    args: tuple[str, ...] = ()  # parameters taken positionally on the CLI, in order (a list: any number)
    short: dict[str, str] = field(default_factory=dict)  # parameter -> CLI short flag letter
    body: str | None = None     # a JSON parameter the CLI also reads from --file or stdin ('-')
    op: bool = False            # the CLI command is the generated operation `command`, run as this job when
                                # the service runs
    tool: str | None = None     # the MCP tool that starts a run of it (None: no tool)

    def parameters(self, surface: str | None = None) -> tuple[Param, ...]:
        """The request model's fields in order, as the operations' parameters (`ops.Param`); with `surface`
        ("cli", "http", "mcp"), only those it offers."""
        return tuple(param for param, surfaces in model_fields(self.request)
                     if surface is None or surface in surfaces)

    @property
    def hidden(self) -> dict[str, tuple[str, ...]]:
        """`{surface: parameters it does not offer}`, for the surfaces that leave some out."""
        fields = model_fields(self.request)
        hidden = {s: tuple(p.name for p, surfaces in fields if s not in surfaces) for s in SURFACES}
        return {s: names for s, names in hidden.items() if names}

    def bind(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The arguments of a call of the job (as its function takes them, `workspace` aside) by name: a wrong
        or missing one is a TypeError as for any call."""
        signature = inspect.Signature([inspect.Parameter(p.name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                         default=p.default) for p in self.parameters()])
        return dict(signature.bind(*args, **kwargs).arguments)

    def defaults(self) -> dict[str, Any]:
        """`{parameter: default}` of the parameters that have one."""
        return {p.name: p.default for p in self.parameters() if not p.required}


def model_fields(model: type) -> tuple[tuple[Param, tuple[str, ...]], ...]:
    """`(Param, surfaces offering it)` per field of a request model, in order: its type with its constraints
    (the `Help` and `Only` markers taken off), its default, its help."""
    hints = typing.get_type_hints(model, include_extras=True)
    found = []
    for f in dataclasses.fields(model):
        annotation, extras = hints[f.name], ()
        if typing.get_origin(annotation) is Annotated:
            extras = annotation.__metadata__
            kept = tuple(m for m in extras if not isinstance(m, (Help, Only)))
            base = typing.get_args(annotation)[0]
            annotation = Annotated[(base, *kept)] if kept else base
        helps = [m.text for m in extras if isinstance(m, Help)]
        only = next((m.surfaces for m in extras if isinstance(m, Only)), SURFACES)
        default = inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default
        found.append((Param(f.name, annotation, default, helps[0] if helps else PARAM_HELP.get(f.name, "")), only))
    return tuple(found)


JOBS: dict[str, Job] = {job.name: job for job in (
    Job("auto_memory", "flows.auto_memory", "auto-memory",
        "Summarise a conversation's not-yet-summarised messages into its daily card.", AutoMemoryRequest,
        needs_llm=True, tool="auto_memory", short={"session_id": "s", "messages": "m"}, body="messages"),
    Job("auto_resource", "flows.auto_resource", "auto-resource",
        "Write, update or remove the daily card of a resource file under resource/[YYYY-MM-DD/].",
        AutoResourceRequest, needs_llm=True, args=("path",)),
    Job("auto_dream", "flows.auto_dream", "dream",
        "Consolidate recent daily cards into digest nodes and write the day's interests.", AutoDreamRequest,
        needs_llm=True, tool="dream"),
    Job("proactive", "flows.proactive", "proactive",
        "The topics to bring up on a day, from daily/<date>/interests.yaml (written by dream).", ProactiveRequest),
    Job("reindex", "flows.maintenance", "reindex", "Rebuild the whole index from the files.", NoParameters, op=True),
    Job("optimize", "flows.maintenance", "optimize",
        "Index maintenance: catch up with changed files, then compact the DuckDB index.", NoParameters, op=True),
    Job("doctor", "flows.governance", "doctor",
        "Check the memory graph: broken links and anchors, orphans, missing sources, near-duplicates, bad "
        "frontmatter, index drift.", DoctorRequest),
    Job("link_mine", "flows.governance", "link-mine",
        "Weave links to related nodes into digest nodes changed since the last run (or given paths).",
        LinkMineRequest, needs_llm=True, args=("paths",)),
    Job("merge", "flows.governance", "merge",
        "Fold near-duplicate digest nodes (or given [survivor, victim] pairs) into their survivors: sources and "
        "links united, links to the victim retargeted, the victim deleted.", MergeRequest, needs_llm=True),
    Job("split", "flows.governance", "split",
        "Break overlong digest nodes (or given paths) into focused nodes that link to each other.", SplitRequest,
        needs_llm=True, args=("paths",)),
    Job("archive", "flows.governance", "archive",
        "Move stale and expired digest nodes (or given paths) to digest/archive/, links retargeted.",
        ArchiveRequest, args=("paths",)),
)}

# The conversation turn: not a flow, but the request every surface takes (`dreamflow turn`, `POST /turn`, the
# MCP `turn` tool), declared the same way; its function is `engine.access.turns.record_turn`.
TURN = Job("record_turn", "engine.access.turns", "turn",
           "Record a conversation turn; every N turns (or with compact) auto_memory summarises the session.",
           TurnRequest, tool="turn", body="messages")
