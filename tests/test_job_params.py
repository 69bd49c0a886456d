"""A job's parameters are its request model (engine/jobs.py), the same as its function's real signature: what
the surfaces show is what the function takes, with its defaults."""

import importlib
import inspect
import json
import typing
from pathlib import Path

import pytest
import yaml

from deployments.serve import DEPLOYMENTS
from engine.jobs import JOBS, TURN

ROOT = Path(__file__).resolve().parents[1]


def _function(job):
    fn = getattr(importlib.import_module(job.module), job.name)
    return getattr(fn, "fn", fn)


def job_defaults(job) -> dict:
    """`{name: default}` of the job function's parameters that have one, from its real signature."""
    return {p.name: p.default for p in inspect.signature(_function(job)).parameters.values()
            if p.default is not inspect.Parameter.empty and p.kind is not inspect.Parameter.KEYWORD_ONLY}


def _base(hint):
    """`Annotated[int, Ge(0), ...]` -> int: the type a constraint narrows."""
    return typing.get_args(hint)[0] if typing.get_origin(hint) is typing.Annotated else hint


@pytest.mark.parametrize("job", [*JOBS.values(), TURN], ids=lambda job: job.name)
def test_the_request_model_equals_the_real_functions_signature(job):
    fn = _function(job)
    signature = inspect.signature(fn)
    hints = typing.get_type_hints(fn)
    positional = [p for p in signature.parameters.values()
                  if p.kind is not inspect.Parameter.KEYWORD_ONLY and p.name != "workspace"]
    declared = job.parameters()
    assert [p.name for p in declared] == [p.name for p in positional]
    for param, model in zip(positional, declared):
        assert model.default == param.default, (job.name, param.name)
        assert _base(model.annotation) == hints[param.name], (job.name, param.name)


def test_every_deployment_is_a_declared_job_and_every_parameter_has_help():
    assert set(DEPLOYMENTS) == set(JOBS)
    for job in (*JOBS.values(), TURN):
        assert job.summary.endswith(".")
        for surface in ("cli", "http", "mcp"):
            assert all(p.help for p in job.parameters(surface)), (job.name, surface)
        assert not set(job.args) - {p.name for p in job.parameters("cli")}, job.name


def test_every_surface_offers_the_functions_defaults():
    from click import Argument

    from dreamflow.cli import cli
    from dreamflow.mcp.server import tools

    for job in JOBS.values():
        command = cli.get_command(None, job.command)
        defaults = {k: v for k, v in job_defaults(job).items() if k != "workspace"}
        options = {p.name: p.default for p in command.params if not isinstance(p, Argument)}
        assert {k: options[k] for k in options if k in defaults} == \
            {k: v for k, v in defaults.items() if k in options}, job.name
        if not job.op:
            assert set(defaults) - set(options) <= set(job.hidden.get("cli", ())) | set(job.args), job.name
    dream = tools("all")["dream"]
    assert {p.name: p.default for p in dream.params if p.name != "workspace"} == JOBS["auto_dream"].defaults()
    assert JOBS["auto_dream"].defaults()["scan_days"] == 2  # flows/auto_dream.py's


def test_prefect_yaml_declares_the_deployments_as_serve_does():
    """prefect.yaml is the same deployments for `prefect deploy --all`: its descriptions are the jobs'."""
    declared = yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"]
    by_entry = {d.entrypoint: d for d in DEPLOYMENTS.values()}
    for entry in declared:
        d = by_entry[entry["entrypoint"]]
        manual = entry["name"] == "manual" and d.manual
        assert entry["description"] == (d.described("started by hand") if manual else d.description), \
            json.dumps(entry["description"])
    assert {(e["entrypoint"], e["name"]) for e in declared} == \
        {(d.entrypoint, name.split("/")[1]) for d in DEPLOYMENTS.values() for name in d.full_names}


def test_the_doctors_thresholds_are_written_once():
    """stale_days and overlong_lines default to the constants of storage/arguments.py on every layer: the flows
    (read through the name they import), Memory.doctor (the operation) and the storage report."""
    from storage import arguments
    from storage.index import doctor
    from storage.memory import Memory

    expected = {"stale_days": arguments.STALE_DAYS, "overlong_lines": arguments.OVERLONG_LINES}
    for fn in (Memory.doctor, Memory.doctor_fix, doctor.check):
        assert {k: inspect.signature(fn).parameters[k].default for k in expected} == expected
    for name in ("doctor", "split", "archive"):
        defaults = JOBS[name].defaults()
        assert {k: defaults[k] for k in expected if k in defaults} == {k: v for k, v in expected.items()
                                                                       if k in defaults}
    assert JOBS["doctor"].defaults()["stale_days"] == 180
