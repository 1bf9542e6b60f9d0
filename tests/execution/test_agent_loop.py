"""ctx.converse (runs/execution/agent_loop.py) on real workers against the demo service's model:
a worker killed inside research's loop, and what its resume asks of the model."""

from __future__ import annotations

import pytest
from django.conf import settings

from demo_service.process import ServiceClient
from runs.execution.agent_loop import FACTS_PREAMBLE, conversations_of
from runs.models import Effect, Event, Run
from runs.planning.planner import Action, compute_plan
from runs.planning.resume import approve
from tests.support.plans import crashed_run, wait_succeeded


def billed_chats(mark: int) -> dict[str, int]:
    service = ServiceClient(settings.DEMO_SERVICE_URL)
    counted: dict[str, int] = {}
    for row in service.meter(op="chat", after=mark):
        if row["outcome"] == "billed":
            counted[row["key"]] = counted.get(row["key"], 0) + row["count"]
    return counted


@pytest.mark.parametrize(
    ("point", "expected"),
    [
        # After the tool result: turn 1 is recorded, the search ran, turn 2 never did.
        ("research/search-1/after", {"turn-1": Action.REUSE, "turn-2": Action.CALL}),
        # After a model turn, before its answer was recorded: retried under its own key.
        ("research/turn-1/after", {"turn-1": Action.RETRY_SAME_KEY, "turn-2": Action.CALL}),
    ],
)
def test_a_crash_mid_loop_reuses_the_recorded_turns_and_calls_only_the_missing_one(
    workers, point, expected
):
    run = crashed_run(workers, {"crash": point})
    plan = compute_plan(run)
    turns = {e.call_id: e.action for e in plan.effects if e.call_id.startswith("turn-")}
    assert turns == expected
    recorded = Effect.objects.filter(run=run, tool="model", call_id="turn-1").get()
    mark = ServiceClient(settings.DEMO_SERVICE_URL).marks()["meter"]

    approve(run, "strict", plan.fingerprint, actor="test")
    run = wait_succeeded(run)

    billed = billed_chats(mark)
    if expected["turn-1"] == Action.REUSE:
        assert recorded.delivery_key not in billed  # reused: not asked, not billed
    turn_2 = Effect.objects.get(run=run, call_id="turn-2")
    assert billed[turn_2.delivery_key] == 1  # the missing turn, once
    assert Event.objects.filter(run=run, type=Event.Type.PLAN_KEPT).exists()
    [latest, *_] = conversations_of(run.pk, "research")
    assert latest["messages"][0]["content"].startswith(FACTS_PREAMBLE)
    assert [m["role"] for m in latest["messages"]][-3:] == ["assistant", "tool", "assistant"]
    assert run.status == Run.Status.SUCCEEDED
