"""The LLM layer against the scripted OpenAI-compatible server: real `openai` client, real HTTP."""

import json
from typing import Literal

import pytest
from pydantic import BaseModel, Field

from engine.models.llm import (LLM, LLMError, Usage, LLMNotConfigured, concurrency, extract_json, is_strict, learned,
                        parse_model, response_format, response_schema, text_tool_call)
from engine.config.settings import Settings
from llm_server import format_type
from engine.prompts import load_prompt


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
    # the shape with placeholders: not the raw schema (small models echo it back), not an example (they copy it)
    assert '{"name": "<string>", "count": "<integer>"}' in repair[-1]["content"]
    assert "properties" not in repair[-1]["content"]
    assert model.usage.calls == 2
    kinds = model.usage.kinds
    assert (kinds["structured"]["answers"], kinds["structured"]["repairs"], kinds["repair"]["calls"]) == (1, 1, 1)


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


def test_a_failed_call_names_the_endpoint_and_what_to_check(llm, monkeypatch):
    from service_harness import free_port

    llm.reply("no such model", status=404)
    with pytest.raises(LLMError, match=f"model {llm.model} at {llm.base_url}.*check DREAMFLOW_LLM_MODEL"):
        client().chat([{"role": "user", "content": "x"}])
    dead = f"http://127.0.0.1:{free_port()}/v1"
    monkeypatch.setenv("DREAMFLOW_LLM_BASE_URL", dead)
    with pytest.raises(LLMError, match=f"at {dead}.*server runs.*DREAMFLOW_LLM_BASE_URL"):
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


def test_unscripted_request_fails_loudly(llm):
    with pytest.raises(LLMError, match="no scripted reply"):
        client().chat([{"role": "user", "content": "x"}])


def test_usage_adds_up():
    total = Usage().add(Usage(calls=1, total_tokens=10, seconds=0.5)).add({"calls": 2, "total_tokens": 5})
    assert (total.calls, total.total_tokens, total.seconds) == (3, 15, 0.5)
    one = Usage()
    one.record("extract", 0.25)
    one.note("extract", "answers")
    both = Usage().add(one).add(one.as_dict())
    assert both.kinds["extract"]["calls"] == 2 and both.kinds["extract"]["answers"] == 2


def test_extract_json_and_parse_errors():
    assert extract_json('prefix {"a": {"b": 1}} suffix') == {"a": {"b": 1}}
    with pytest.raises(ValueError, match="no JSON"):
        extract_json("nothing here")
    with pytest.raises(ValueError, match="count"):
        parse_model('{"name": "x", "count": "lots"}', Answer)


def test_prompts_are_files():
    for name in ("facts", "compare", "topics", "merge", "split", "link_mine"):
        assert "JSON" in load_prompt(name)


# ---- schema-constrained JSON ------------------------------------------------------------------------------

class Verdict(BaseModel):
    action: Literal["KEEP", "DROP"]
    note: str | None = Field(default=None, max_length=50)
    tags: list[str] = Field(default_factory=list, max_length=3)


ASK = [{"role": "user", "content": "judge"}]


def refuses(kind: str | None):
    return lambda body: format_type(body) == kind


def test_structured_call_sends_a_strict_json_schema_and_max_tokens(llm, monkeypatch):
    monkeypatch.setenv("DREAMFLOW_LLM_MAX_TOKENS", "321")
    llm.reply_json({"action": "KEEP", "note": None, "tags": []})
    assert client().structured(ASK, Verdict, "judge").action == "KEEP"
    body = llm.requests[0]
    assert body["max_tokens"] == 321
    assert not {"temperature", "frequency_penalty", "repeat_penalty", "tools"} & set(body)
    fmt = body["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["name"] == "Verdict" and fmt["json_schema"]["strict"]
    schema = fmt["json_schema"]["schema"]
    assert schema["properties"]["action"]["enum"] == ["KEEP", "DROP"]
    assert schema["properties"]["tags"]["maxItems"] == 3
    assert {"maxLength": 50, "type": "string"} in schema["properties"]["note"]["anyOf"]
    assert schema["additionalProperties"] is False and schema["required"] == ["action", "note", "tags"]
    assert "default" not in json.dumps(schema)


def test_a_free_form_object_is_not_strict():
    class Loose(BaseModel):
        data: dict = Field(default_factory=dict)

    assert not is_strict(response_schema(Loose))
    assert response_format("json_schema", Loose)["json_schema"]["strict"] is False


def test_fallback_chain_on_400_is_remembered_per_endpoint(llm):
    llm.refuse(refuses("json_schema"), message="response_format json_schema is not supported")
    llm.reply_json({"action": "KEEP"}).reply_json({"action": "DROP"})
    assert client().structured(ASK, Verdict).action == "KEEP"
    assert [format_type(r) for r in llm.requests] == ["json_schema", "json_object"]
    # llama.cpp's server constrains json_object replies with `schema`: the same schema as json_schema's
    assert llm.requests[1]["response_format"]["schema"] == llm.requests[0]["response_format"]["json_schema"]["schema"]
    assert learned(llm.base_url, llm.model) == {"json": "json_object+schema"}
    assert client().structured(ASK, Verdict).action == "DROP"  # a new client (the next task) starts where it worked
    assert [format_type(r) for r in llm.requests] == ["json_schema", "json_object", "json_object"]

    llm.refuse(lambda body: "schema" in (body.get("response_format") or {}), message="unknown key 'schema'")
    llm.reply_json({"action": "KEEP"})
    assert client().structured(ASK, Verdict).action == "KEEP"  # a strict server: json_object without the schema
    assert llm.requests[-1]["response_format"] == {"type": "json_object"}
    assert learned(llm.base_url, llm.model)["json"] == "json_object"

    llm.refuse(refuses("json_object"))
    llm.reply_json({"action": "KEEP"}).reply_json({"action": "DROP"})
    assert client().structured(ASK, Verdict).action == "KEEP"
    assert "response_format" not in llm.requests[-1] and learned(llm.base_url, llm.model)["json"] == "none"
    assert client().structured(ASK, Verdict).action == "DROP"
    assert [format_type(r) for r in llm.requests[5:]] == ["json_object", None, None]


def test_a_422_falls_back_like_a_400(llm):
    llm.refuse(refuses("json_schema"), status=422, message="Failed to deserialize the JSON body")  # e.g. TGI
    llm.reply_json({"action": "KEEP"})
    assert client().structured(ASK, Verdict).action == "KEEP"
    assert [format_type(r) for r in llm.requests] == ["json_schema", "json_object"]


def test_a_reply_without_usage_counts_the_call_and_its_time(llm):
    body = {"id": "x", "object": "chat.completion", "created": 0, "model": llm.model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": '{"action": "KEEP"}'},
                         "finish_reason": "stop"}]}
    llm.reply(raw=json.dumps(body).encode())
    model = client()
    assert model.structured(ASK, Verdict, "judge").action == "KEEP"
    kind = model.usage.kinds["judge"]
    assert (kind["calls"], kind["total_tokens"], kind["first_try"]) == (1, 0, 1) and kind["seconds"] > 0


def test_a_400_in_every_mode_is_an_error_and_teaches_nothing(llm):
    llm.refuse(lambda body: True, message="context too long")
    with pytest.raises(LLMError, match="context too long"):
        client().structured(ASK, Verdict)
    assert [format_type(r) for r in llm.requests] == ["json_schema", "json_object", "json_object", None]
    assert learned(llm.base_url, llm.model) == {}


def test_forced_json_mode_and_sampling_options(llm, monkeypatch):
    monkeypatch.setenv("DREAMFLOW_LLM_JSON", "json_object")
    monkeypatch.setenv("DREAMFLOW_LLM_TEMPERATURE", "0.2")
    monkeypatch.setenv("DREAMFLOW_LLM_FREQUENCY_PENALTY", "0.5")
    monkeypatch.setenv("DREAMFLOW_LLM_REPEAT_PENALTY", "1.1")
    llm.reply_json({"action": "KEEP"})
    client().structured(ASK, Verdict)
    body = llm.requests[0]
    assert body["response_format"]["type"] == "json_object" and body["response_format"]["schema"]["properties"]
    assert len(llm.requests) == 1
    assert (body["temperature"], body["frequency_penalty"], body["repeat_penalty"]) == (0.2, 0.5, 1.1)
    monkeypatch.setenv("DREAMFLOW_LLM_JSON", "xml")
    with pytest.raises(Exception, match="DREAMFLOW_LLM_JSON"):
        client()


def test_a_reply_cut_at_max_tokens_is_repaired_with_the_reason(llm):
    llm.reply('{"action": "KEEP", "note": "aaaaaaaa', finish_reason="length").reply_json({"action": "KEEP"})
    assert client().structured(ASK, Verdict).action == "KEEP"
    assert "cut at the limit of 2048 tokens" in llm.requests[1]["messages"][-1]["content"]


def test_concurrency_is_one_for_a_local_endpoint(monkeypatch):
    def limit(url: str, setting: str = "0") -> int:
        monkeypatch.setenv("DREAMFLOW_LLM_BASE_URL", url)
        monkeypatch.setenv("DREAMFLOW_LLM_CONCURRENCY", setting)
        return concurrency(Settings())

    assert limit("http://127.0.0.1:8080/v1") == 1 and limit("http://localhost:11434/v1") == 1
    assert limit("https://api.openai.com/v1") == 0 and limit("http://127.0.0.1:8080/v1", "3") == 3


# ---- tool calls written as text ------------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    '{"name": "edit", "arguments": {"path": "a.md", "old": "x", "new": "y"}}',
    'Sure:\n```json\n{"name": "read", "parameters": {"path": "a.md"}}\n```',
    '<tool_call>\n{"name": "search", "arguments": "{\\"query\\": \\"lisbon\\"}"}\n</tool_call>',
    '{"type": "function", "function": {"name": "read", "arguments": {"path": "a.md"}}}',
    '{"type": "function", "name": "read", "parameters": {"path": "a.md"}}',  # Llama 3.2
    '<|python_tag|>{"name": "search", "parameters": {"query": "lisbon"}}',  # Llama 3.1
    '<function=search>{"query": "lisbon"}</function>',  # Llama 3.1, custom tools
    '[TOOL_CALLS] [{"name": "search", "arguments": {"query": "lisbon"}}]',  # Mistral
    '[TOOL_CALLS]search[ARGS]{"query": "lisbon"}',  # Mistral, v11 template
    'functools[{"name": "search", "arguments": {"query": "lisbon"}}]',  # Phi / Firefunction
    '{"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", '
    '"function": {"name": "search", "arguments": "{\\"query\\": \\"lisbon\\"}"}}]}',  # a message written out
])
def test_text_tool_calls_are_recognised(text):
    assert text_tool_call(text)[0] in ("edit", "read", "search")


def test_answers_are_not_tool_calls():
    assert text_tool_call('{"name": "Trip", "description": "d", "content": "c"}') is None
    assert text_tool_call('{"units": [{"name": "Trip", "summary": "<function> of a kettle", "paths": []}]}') is None
    assert text_tool_call("no json") is None


def test_a_text_tool_call_is_never_the_answer(llm):
    class Card(BaseModel):
        name: str
        content: str | None = None

    llm.reply_json({"name": "edit", "arguments": {"path": "daily/x.md", "old": "a", "new": "b"}})
    llm.reply_json({"name": "Trip planning", "content": "Lisbon in June"})
    assert client().structured(ASK, Card).name == "Trip planning"
    assert "call of the tool 'edit' as text" in llm.requests[1]["messages"][-1]["content"]
