"""A job's parameters are read from its flow's source (engine/job_params.py): what the surfaces show is what
the flow declares, and the CLI and MCP job tools offer the flow's defaults."""

import importlib
import inspect

import pytest

from deployments.serve import DEPLOYMENTS
from engine.job_params import REQUIRED, job_defaults, job_params


@pytest.mark.parametrize("deployment", DEPLOYMENTS.values(), ids=lambda d: d.flow)
def test_what_is_read_from_the_source_equals_the_real_flows_signature(deployment):
    flow = getattr(importlib.import_module(deployment.module), deployment.flow)
    signature = inspect.signature(flow.fn)
    read = job_params(deployment.module.removeprefix("flows."), deployment.flow)
    assert list(read) == list(signature.parameters)
    for name, param in signature.parameters.items():
        assert read[name].default == (REQUIRED if param.default is inspect.Parameter.empty else param.default)
        assert read[name].annotation == param.annotation  # the flows use `from __future__ import annotations`


def test_the_cli_and_the_mcp_dream_tool_offer_the_flows_defaults():
    from dreamflow.cli.flow_commands import dream
    from dreamflow.cli.governance_commands import doctor, link_mine, split
    from dreamflow.mcp.targets import Target

    dream_defaults = job_defaults("auto_dream", "auto_dream")
    assert {n: p.default for n, p in inspect.signature(Target.dream).parameters.items() if n != "self"} == \
        {k: v for k, v in dream_defaults.items() if k != "workspace"}
    for command, module, flow in ((dream, "auto_dream", "auto_dream"), (doctor, "governance", "doctor"),
                                  (link_mine, "governance", "link_mine"), (split, "governance", "split")):
        defaults = {k: v for k, v in job_defaults(module, flow).items() if isinstance(v, int) and v is not False}
        shown = {p.name: p.default for p in command.params if p.name in defaults}
        assert shown == {k: defaults[k] for k in shown} and len(shown) >= 2


def test_a_missing_flow_is_a_clear_error():
    with pytest.raises(LookupError, match="no function nope"):
        job_params("governance", "nope")
