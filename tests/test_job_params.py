"""A job's parameters are read from its function's source (engine/job_params.py) and exposed from its one
declaration (engine/jobs.py): what the surfaces show is what the function declares, with its defaults."""

import importlib
import inspect
import json
from pathlib import Path

import pytest
import yaml

from deployments.serve import DEPLOYMENTS
from engine.job_params import REQUIRED, job_defaults, job_params
from engine.jobs import JOBS, TURN

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("job", [*JOBS.values(), TURN], ids=lambda job: job.name)
def test_what_is_read_from_the_source_equals_the_real_functions_signature(job):
    fn = getattr(importlib.import_module(job.module), job.name)
    signature = inspect.signature(getattr(fn, "fn", fn))
    read = job_params(job.module, job.name)
    positional = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.KEYWORD_ONLY]
    assert list(read) == [p.name for p in positional]
    for param in positional:
        assert read[param.name].default == (REQUIRED if param.default is inspect.Parameter.empty else param.default)
        assert read[param.name].annotation == param.annotation  # `from __future__ import annotations`


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
        defaults = {k: v for k, v in job_defaults(job.module, job.name).items() if k != "workspace"}
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


def test_a_missing_function_is_a_clear_error():
    with pytest.raises(LookupError, match="no function nope"):
        job_params("flows.governance", "nope")


def test_the_doctors_thresholds_are_written_once():
    """stale_days and overlong_lines default to the constants of storage/arguments.py on every layer: the flows
    (read through the name they import), Memory.doctor (the operation) and the storage report."""
    from storage import arguments, doctor
    from storage.memory import Memory

    expected = {"stale_days": arguments.STALE_DAYS, "overlong_lines": arguments.OVERLONG_LINES}
    for fn in (Memory.doctor, Memory.doctor_fix, doctor.check):
        assert {k: inspect.signature(fn).parameters[k].default for k in expected} == expected
    for name in ("doctor", "split", "archive"):
        defaults = JOBS[name].defaults()
        assert {k: defaults[k] for k in expected if k in defaults} == {k: v for k, v in expected.items()
                                                                       if k in defaults}
    assert JOBS["doctor"].defaults()["stale_days"] == 180


def test_a_default_that_is_no_imported_constant_is_a_clear_error(tmp_path, monkeypatch):
    from engine import job_params as module

    (tmp_path / "jobs_here.py").write_text("def job(days: int = UNKNOWN): ...\n")
    monkeypatch.setattr(module, "ROOT", tmp_path)
    with pytest.raises(LookupError, match="UNKNOWN is no constant"):
        module.job_params("jobs_here", "job")
