"""The demo service's scripted model (demo_service/scripts.py) as an agent's client sees it:
the official `openai` SDK over real HTTP, against a script registered with POST /v1/scripts."""

from __future__ import annotations

import json
from typing import Literal

import httpx
import openai
import pytest
from pydantic import BaseModel

WEATHER = {
    "type": "function",
    "function": {
        "name": "weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
            "required": ["city", "days"],
        },
    },
}
NOTE = {"type": "function", "function": {"name": "note", "parameters": {"type": "object"}}}


class Verdict(BaseModel):
    label: Literal["ignore", "notify", "respond"]
    reason: str
    score: int


VERDICT_FORMAT = {
    "type": "json_schema",
    "json_schema": {"name": "Verdict", "schema": Verdict.model_json_schema()},
}


@pytest.fixture
def client(demo_service):
    http = httpx.Client(trust_env=False)
    yield openai.OpenAI(
        base_url=f"{demo_service.url}/v1", api_key="not-needed", max_retries=0, http_client=http
    )
    http.close()


def ask(client, model: str, messages: list[dict], **params):
    return client.chat.completions.create(model=model, messages=messages, **params)


USER = [{"role": "user", "content": "Plan my trip."}]


def test_a_scripted_turn_calls_several_tools_with_their_arguments_completed(client, demo_service):
    model = demo_service.script(
        "trip",
        [{"tool_calls": [{"name": "weather", "arguments": {"city": "Lyon"}}, {"name": "note"}]}],
    )

    reply = ask(client, model, USER, tools=[WEATHER, NOTE])

    [choice] = reply.choices
    assert choice.finish_reason == "tool_calls"
    calls = [(c.function.name, json.loads(c.function.arguments)) for c in choice.message.tool_calls]
    assert calls == [("weather", {"city": "Lyon", "days": 1}), ("note", {})]


def test_a_json_answer_honours_the_requests_json_schema(client, demo_service):
    model = demo_service.script("verdict", [{"json": {"label": "respond"}}])

    reply = ask(client, model, USER, response_format=VERDICT_FORMAT)

    verdict = Verdict.model_validate_json(reply.choices[0].message.content)
    assert verdict.label == "respond"


def test_an_invalid_answer_fails_the_schema_and_the_next_step_answers_again(client, demo_service):
    model = demo_service.script("retry", [{"invalid": True}, {"json": "schema"}])

    first = ask(client, model, USER, response_format=VERDICT_FORMAT).choices[0].message
    with pytest.raises(ValueError):
        Verdict.model_validate_json(first.content)
    again = [
        *USER,
        {"role": "assistant", "content": first.content},
        {"role": "user", "content": "no"},
    ]
    second = ask(client, model, again, response_format=VERDICT_FORMAT).choices[0].message

    assert Verdict.model_validate_json(second.content).label == "ignore"


def test_each_new_conversation_follows_its_own_script_and_a_retry_gets_the_same_one(
    client, demo_service
):
    model = demo_service.script(
        "two", conversations=[[{"content": "first"}], [{"content": "second"}]]
    )
    triage = [{"role": "system", "content": "triage"}, *USER]
    reply = [{"role": "system", "content": "reply"}, *USER]

    said = [ask(client, model, m).choices[0].message.content for m in (triage, reply, triage)]

    assert said == ["first", "second", "first"]
    with pytest.raises(openai.BadRequestError, match="has 2 conversations"):
        ask(client, model, [{"role": "system", "content": "a third"}, *USER])


def test_a_scripted_answer_reports_real_usage_and_is_billed_every_time(client, demo_service):
    model = demo_service.script("usage", [{"content": "Lyon, three days, by train."}])

    replies = [ask(client, model, USER) for _ in range(2)]

    assert {r.usage.completion_tokens for r in replies} == {8}
    assert replies[0].usage.prompt_tokens == 4
    assert demo_service.count("chat") == 2


def test_the_scripted_model_meets_the_services_faults(client, demo_service):
    model = demo_service.script("faulty", [{"content": "ok"}])
    demo_service.arm("chat", "error", status=503)

    with pytest.raises(openai.InternalServerError):
        ask(client, model, USER)
    assert ask(client, model, USER).choices[0].message.content == "ok"


def test_a_script_that_has_no_step_left_or_no_such_name_is_a_400_that_says_so(client, demo_service):
    model = demo_service.script("short", [{"content": "only"}])
    later = [*USER, {"role": "assistant", "content": "only"}, {"role": "user", "content": "more"}]

    with pytest.raises(openai.BadRequestError, match="has 1 steps; this request asks for step 2"):
        ask(client, model, later)
    with pytest.raises(openai.BadRequestError, match="no script named 'missing'"):
        ask(client, "script:missing", USER)


@pytest.mark.parametrize(
    "body",
    [
        {"name": "x"},
        {"name": "x", "steps": []},
        {"name": "x", "steps": [{"content": "a", "json": {}}]},
        {"name": "x", "steps": [{"tool_calls": [{"arguments": {}}]}]},
        {"name": "x", "steps": [{"json": "made up"}]},
        {"name": "x", "steps": [{"content": "a"}], "conversations": [[{"content": "a"}]]},
    ],
)
def test_a_script_that_is_not_one_is_refused_and_nothing_is_stored(demo_service, body):
    response = httpx.post(f"{demo_service.url}/v1/scripts", json=body, trust_env=False)

    assert response.status_code == 400
    listed = httpx.get(f"{demo_service.url}/v1/scripts", trust_env=False).json()
    assert listed == {"data": []}
