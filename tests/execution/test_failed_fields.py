"""What a FAILED records as fields rather than in the words of its error: whether a call's
answer timed out (`timed_out`, from pipeline.timed_out()), and the rules a stage's output
failed (`failed_rules`, by name). The inbox's sentence reads these fields (runs/dashboard/
stops.py); nothing reads them off an error's words.

Stages run in this process (`engine.execute`, committed data: the heartbeat thread has its
own connection)."""

from __future__ import annotations

import pytest

from demo.simulators import meter
from runs import engine
from runs.execution.hooks import CallHooks
from runs.models import Event, ReplayPolicy, Run
from runs.pipeline import (
    Input,
    KeyParts,
    OutcomeUnknown,
    Pipeline,
    Rule,
    Stage,
    StageOutput,
    Tool,
)
from tests.support.pipelines import registered


def _send(args: dict, key: str) -> dict:
    """The call happens, then fails as the run's `failure` input says."""
    meter("sender", "send", key[:32], billed=True)
    if args["failure"] == "reset":
        raise ConnectionResetError("peer went away")
    if args["failure"] == "wrapped-timeout":
        # A library's own error whose cause is the socket's time-out (as requests raises).
        raise RuntimeError("read failed") from TimeoutError("timed out")
    return {"external_id": f"sent-{key[:8]}"}


def _send_key(ctx, args: dict) -> KeyParts:
    return KeyParts("acct", "sender", f"{ctx.root_id}/send", args["failure"])


def _work(ctx) -> StageOutput:
    ctx.call("send", "send", failure=ctx.inputs["failure"])
    return StageOutput(outputs={"count": 2})


failing_pipeline = Pipeline(
    name="failing",
    inputs=(Input("failure", lambda pinned: "none", versioned=False),),
    tools=(Tool("send", ReplayPolicy.IDEMPOTENT, _send, key=_send_key),),
    stages=(
        Stage(
            "work",
            _work,
            consumes=("failure",),
            tools=("send",),
            rules=(
                Rule("count == 3", lambda o: o.outputs["count"] == 3),
                Rule("count > 0", lambda o: o.outputs["count"] > 0),
                Rule("count is odd", lambda o: o.outputs["count"] % 2 == 1),
            ),
        ),
    ),
)


class LateAnswer(CallHooks):
    """The call happens; its answer never arrives in time (as the demo's timeout fault)."""

    def after_call(self, ctx, call_id: str, result) -> None:
        raise OutcomeUnknown(f"{call_id}: no answer", timed_out=True)


@pytest.fixture(autouse=True)
def failing(transactional_db, settings):
    with registered(settings, "tests.execution.test_failed_fields.failing_pipeline"):
        yield


def failed_payload(failure: str, hooks: CallHooks | None = None) -> dict:
    run = engine.start_run("failing", {"failure": failure}, actor="test", enqueue=False)
    run.refresh_from_db()
    engine.execute(run.pk, run.current_stage, run.ticket, holder="worker:test", hooks=hooks)
    assert Run.objects.get(pk=run.pk).status == Run.Status.FAILED
    return Event.objects.get(run=run, type=Event.Type.FAILED).payload


def test_a_call_whose_answer_came_too_late_records_that_it_timed_out():
    payload = failed_payload("none", LateAnswer())

    assert (payload["status"], payload["timed_out"]) == ("unknown", True)


def test_a_call_whose_error_was_caused_by_a_time_out_records_that_it_timed_out():
    payload = failed_payload("wrapped-timeout")

    assert (payload["status"], payload["timed_out"]) == ("unknown", True)


def test_a_call_whose_connection_dropped_records_that_it_did_not_time_out():
    payload = failed_payload("reset")

    assert (payload["status"], payload["timed_out"]) == ("unknown", False)


def test_a_failed_verification_records_the_failed_rules_by_name():
    payload = failed_payload("none")

    assert payload["failed_rules"] == ["count == 3", "count is odd"]
