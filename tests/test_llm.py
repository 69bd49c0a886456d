"""The LLM layer against the scripted OpenAI-compatible server: real `openai` client, real HTTP."""

import json

import pytest
from pydantic import BaseModel

from engine.llm import LLM, LLMError, LLMNotConfigured, Usage, extract_json, load_prompt, parse_model
from engine.settings import Settings
from llm_server import json_reply


class Answer(BaseModel):
    name: str
    count: int


def client() -> LLM:
    return LLM.from_settings(Settings())


def test_not_configured_is_a_clear_error(no_llm):
    with pytest.raises(LLMNotConfigured, match="DREAMFLOW_LLM_BASE_URL"):
        LLM.from_settings(Settings())


def test_structured_answer_and_usage(llm):
    llm.reply_json({"name": "a", "count": 2}, usage={"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16})
    model = client()
    answer = model.structured([{"role": "user", "content": "count"}], Answer)
    assert answer == Answer(name="a", count=2)
    assert (model.usage.calls, model.usage.prompt_tokens, model.usage.completion_tokens) == (1, 11, 5)
    request = llm.requests[0]
    assert request["model"] == llm.model and request["messages"][0]["content"] == "count"


def test_fenced_json_is_accepted(llm):
    llm.reply('Here you go:\n```json\n{"name": "b", "count": 3}\n```')
    assert client().structured([{"role": "user", "content": "x"}], Answer).count == 3


def test_invalid_json_gets_one_repair(llm):
    llm.reply("not json at all").reply_json({"name": "c", "count": 1})
    model = client()
    assert model.structured([{"role": "user", "content": "x"}], Answer).name == "c"
    repair = llm.requests[1]["messages"]
    assert repair[-2] == {"role": "assistant", "content": "not json at all"}
    assert "JSON schema" in repair[-1]["content"] and '"count"' in repair[-1]["content"]
    assert model.usage.calls == 2


def test_invalid_twice_fails_the_call(llm):
    llm.reply_json({"name": "d"}).reply_json({"name": "d", "count": "many"})
    with pytest.raises(LLMError, match="after one repair"):
        client().structured([{"role": "user", "content": "x"}], Answer)
    assert "count: Field required" in llm.requests[1]["messages"][-1]["content"]


def test_timeout_is_an_llm_error(llm, monkeypatch):
    monkeypatch.setenv("DREAMFLOW_LLM_TIMEOUT", "0.3")
    llm.reply_json({"name": "late", "count": 1}, delay=1.0)
    with pytest.raises(LLMError, match="timed out"):
        client().structured([{"role": "user", "content": "x"}], Answer)


def test_http_error_is_an_llm_error(llm):
    llm.reply("overloaded", status=503)
    with pytest.raises(LLMError, match="overloaded"):
        client().chat([{"role": "user", "content": "x"}])


def test_broken_response_body_is_an_llm_error(llm):
    llm.reply(raw=b"{not json")
    with pytest.raises(LLMError):
        client().chat([{"role": "user", "content": "x"}])


def test_retries_with_backoff_then_succeeds(llm, monkeypatch):
    monkeypatch.setenv("DREAMFLOW_LLM_MAX_RETRIES", "1")
    llm.reply("busy", status=500).reply_json({"name": "e", "count": 5})
    assert client().structured([{"role": "user", "content": "x"}], Answer).count == 5
    assert len(llm.requests) == 2


def test_agent_loop_without_tools_and_step_bound(llm):
    llm.on("routed", json_reply({"name": "routed", "count": 9}))
    assert client().agent([{"role": "user", "content": "routed request"}], Answer).count == 9
    llm.reply(tool_calls=[{"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}])
    llm.reply(tool_calls=[{"id": "c2", "type": "function", "function": {"name": "read", "arguments": "{}"}}])
    with pytest.raises(LLMError, match="within 2 steps"):
        client().agent([{"role": "user", "content": "x"}], Answer, max_steps=2)
    tool_results = [m for m in llm.requests[-1]["messages"] if m["role"] == "tool"]
    assert json.loads(tool_results[0]["content"]) == {"error": "no tools are available"}


def test_unscripted_request_fails_loudly(llm):
    with pytest.raises(LLMError, match="no scripted reply"):
        client().chat([{"role": "user", "content": "x"}])


def test_usage_adds_up():
    total = Usage().add(Usage(calls=1, total_tokens=10, seconds=0.5)).add({"calls": 2, "total_tokens": 5})
    assert (total.calls, total.total_tokens, total.seconds) == (3, 15, 0.5)


def test_extract_json_and_parse_errors():
    assert extract_json('prefix {"a": {"b": 1}} suffix') == {"a": {"b": 1}}
    with pytest.raises(ValueError, match="no JSON"):
        extract_json("nothing here")
    with pytest.raises(ValueError, match="count"):
        parse_model('{"name": "x", "count": "lots"}', Answer)


def test_prompts_are_files():
    for name in ("auto_memory", "auto_resource", "extract", "integrate", "topics"):
        assert "JSON" in load_prompt(name)

