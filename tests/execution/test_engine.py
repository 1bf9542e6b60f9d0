"""Stage execution: a whole run through a worker process, reuse of confirmed effects on a
re-executed stage, and what the engine does with bad input, bad output and a lost lease.

Behaviours that need no second process run `engine.execute` in-process (committed data,
`transactional_db`, because the heartbeat thread has its own connection); the end-to-end ones
use real `rqworker` processes.
"""

from __future__ import annotations

import pytest

from demo import faults
from demo.models import SimCall
from demo.simulators import meter
from runs import engine
from runs.execution.hooks import CallHooks
from runs.ledger import artifacts, leases
from runs.ledger.verify import verify_chain
from runs.models import ApprovalMode, Checkpoint, Effect, Event, ReplayPolicy, Run
from runs.pipeline import (
    Input,
    InvalidInput,
    KeyParts,
    OutcomeUnknown,
    Pipeline,
    Rule,
    Stage,
    StageOutput,
    Tool,
    UnknownPipeline,
)
from runs.planning.planner import Action, compute_plan
from runs.planning.resume import approve
from tests.support.pipelines import registered
from tests.support.processes import wait_for
from tests.support.state import run_status

# --- a small pipeline whose one stage misbehaves on demand -----------------------------------

MODES = ("ok", "raise", "bad-output", "not-output", "undeclared-tool", "takeover")


def _probe(args: dict, key: str) -> dict:
    meter("probe", "call", str(args.get("n", "")), billed=True)
    return {"n": args.get("n")}


def _stamp(args: dict, key: str) -> dict:
    meter("stamp", "call", key[:32], billed=True)
    return {"external_id": f"stamp-{args['n']}"}


def _stamp_key(ctx, args: dict) -> KeyParts:
    return KeyParts("acct", "stamps", f"{ctx.root_id}/stamp", str(args["n"]))


def _mode_validate(value: str, pinned: dict[str, str]) -> None:
    if value not in MODES:
        raise InvalidInput(f"mode must be one of {', '.join(MODES)}")


def _work(ctx) -> StageOutput | dict:
    mode = ctx.inputs["mode"]
    ctx.call("probe", "probe", n=1)
    if mode == "raise":
        raise RuntimeError("disk full on /scratch")
    if mode == "not-output":
        return {"value": 42}
    if mode == "undeclared-tool":
        ctx.call("stamp", "stamp", n=1)
    if mode == "takeover":
        # Another worker (or the sweeper) takes the run over while this one is mid-stage.
        leases.acquire(ctx.run.pk, "worker:intruder", takeover=True)
        ctx.call("stamp", "stamp", n=2)
    value = 41 if mode == "bad-output" else 42
    return StageOutput(
        outputs={"value": value}, artifacts={"value": (str(value).encode(), "text/plain")}
    )


def _finish(ctx) -> StageOutput:
    return StageOutput(outputs={"done": True})


checks_pipeline = Pipeline(
    name="checks",
    inputs=(Input("mode", lambda pinned: "ok", _mode_validate, versioned=False),),
    tools=(
        Tool("probe", ReplayPolicy.SAFE, _probe),
        Tool("stamp", ReplayPolicy.IDEMPOTENT, _stamp, key=_stamp_key),
    ),
    stages=(
        Stage(
            "work",
            _work,
            consumes=("mode",),
            tools=("probe",),  # deliberately not "stamp"
            rules=(Rule("value == 42", lambda o: o.outputs["value"] == 42),),
        ),
        Stage("finish", _finish),
    ),
)


@pytest.fixture
def checks(transactional_db, settings):
    with registered(settings, "tests.execution.test_engine.checks_pipeline"):
        yield


def start_checks(mode: str) -> Run:
    return engine.start_run("checks", {"mode": mode}, actor="test", enqueue=False)


def execute_first_stage(run: Run) -> str:
    run.refresh_from_db()
    return engine.execute(run.pk, run.current_stage, run.ticket, holder="worker:test")


def meter_count(system: str) -> int:
    return SimCall.objects.filter(system=system).count()


# --- end to end through a worker process -------------------------------------------------------


def test_a_run_completes_through_a_worker_process_with_a_consistent_ledger(workers, demo_service):
    run = engine.start_run("content", {}, actor="test")
    worker = workers.start(burst=True)
    wait_for(lambda: run_status(run) == Run.Status.SUCCEEDED, timeout=120, what="succeeded")
    worker.wait(timeout=60)

    run.refresh_from_db()
    seqs = list(Event.objects.filter(run=run).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, run.last_seq + 1))
    assert verify_chain(run.pk).ok

    checkpoints = list(Checkpoint.objects.filter(run=run).order_by("last_seq"))
    assert [c.stage for c in checkpoints] == ["research", "draft", "visual", "prefill", "publish"]
    for checkpoint in checkpoints:
        sealing = Event.objects.get(run=run, seq=checkpoint.last_seq)
        assert (sealing.type, sealing.stage) == (Event.Type.VERIFIED, checkpoint.stage)
        assert all(rule["passed"] for rule in checkpoint.manifest["rules"])

    effects = list(Effect.objects.filter(run=run))
    # The loop's two model turns and the draft's, 3 renders, 3 uploads, the publish, the charge
    assert len(effects) == 11
    for effect in effects:
        assert effect.status == Effect.Status.CONFIRMED and effect.external_id
        told = Event.objects.filter(run=run, idempotency_key=effect.delivery_key)
        assert sorted(told.values_list("type", flat=True)) == [
            Event.Type.TOOL_CALLED,
            Event.Type.TOOL_RESULT,
        ]
    assert Event.objects.filter(run=run).last().type == Event.Type.SUCCEEDED
    assert len(demo_service.articles()) == 1


def test_rerunning_a_stage_whose_effects_are_confirmed_calls_no_renderer_or_asset_store(
    workers, demo_service, settings, tmp_path
):
    """The honest route to "visual runs again": the product's own resume path.

    The run stops after visual and prefill are verified (the publish call's answer never
    arrives, so the run fails with the outcome unknown). Then one of visual's images is altered
    in storage, so the planner can no longer build on the visual checkpoint and falls back to
    draft's: a strict resume re-executes visual through a worker process. All six of visual's
    effects are confirmed in the ledger, so the renderer and the asset store must see no
    request at all, while visual really did run again (it seals a second checkpoint).
    """
    settings.MEDIA_ROOT = tmp_path  # workers inherit it; the altered blob stays private
    run = faults.start_run("content", {}, actor="test", faults={"timeout": "publish/publish/after"})
    workers.start(burst=True).wait(timeout=120)
    assert run_status(run) == Run.Status.FAILED

    visual = Checkpoint.objects.get(run=run, stage="visual")
    cover = next(a for a in visual.artifacts if a["name"] == "image-cover")
    (tmp_path / artifacts.get(cover["uri"]).blob).write_bytes(b"<svg>defaced</svg>")

    run.refresh_from_db()
    plan = compute_plan(run)
    assert plan.next_stage == "visual"
    assert {e.action for e in plan.effects if e.stage == "visual"} == {Action.REUSE}
    asked = demo_service.marks()["meter"]

    approve(run, ApprovalMode.STRICT, plan.fingerprint, actor="user:operator")
    workers.start(burst=True).wait(timeout=120)

    assert run_status(run) == Run.Status.SUCCEEDED
    assert demo_service.meter("render", after=asked) == []
    assert demo_service.meter("upload", after=asked) == []
    assert (len(demo_service.renders()), len(demo_service.assets())) == (3, 3)
    assert Checkpoint.objects.filter(run=run, stage="visual").count() == 2
    resumed_visual = Event.objects.filter(
        run=run, stage="visual", type=Event.Type.TOOL_RESULT, seq__gt=plan.last_seq
    )
    assert [e.payload.get("reused") for e in resumed_visual] == [True] * 6
    assert len(demo_service.articles()) == 1


# --- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pipeline", "inputs", "error"),
    [
        ("no-such-pipeline", {}, UnknownPipeline),
        ("content", {"facts": "v99"}, InvalidInput),
        ("content", {"facts": "3"}, InvalidInput),
        ("content", {"colour": "blue"}, InvalidInput),
    ],
)
def test_start_run_refuses_bad_input_and_creates_no_run(facts, pipeline, inputs, error):
    with pytest.raises(error):
        engine.start_run(pipeline, inputs, actor="test", enqueue=False)
    assert not Run.objects.exists()
    assert not Event.objects.exists()


def test_a_pipeline_whose_stage_uses_an_undeclared_tool_is_rejected():
    with pytest.raises(ValueError, match="undeclared tools"):
        Pipeline(name="broken", tools=(), stages=(Stage("s", _finish, tools=("ghost",)),))


def test_a_stage_calling_a_tool_it_did_not_declare_fails_before_the_call(checks):
    run = start_checks("undeclared-tool")
    assert execute_first_stage(run) == "failed"
    assert run_status(run) == Run.Status.FAILED
    failed = Event.objects.get(run=run, type=Event.Type.FAILED)
    assert "may not call tool 'stamp'" in failed.payload["error"]
    assert meter_count("stamp") == 0
    assert not Effect.objects.filter(run=run).exists()
    assert not Checkpoint.objects.filter(run=run).exists()


# --- bad output and crashes ----------------------------------------------------------------------


def test_output_that_fails_verification_fails_the_run_without_a_checkpoint(checks):
    run = start_checks("bad-output")
    assert execute_first_stage(run) == "verification-failed"
    assert run_status(run) == Run.Status.FAILED
    failed = Event.objects.get(run=run, type=Event.Type.FAILED)
    assert failed.payload["rules"] == [{"name": "value == 42", "passed": False, "detail": ""}]
    assert not Event.objects.filter(run=run, type=Event.Type.VERIFIED).exists()
    assert not Checkpoint.objects.filter(run=run).exists()


def test_a_stage_returning_something_else_than_stage_output_fails_the_run(checks):
    run = start_checks("not-output")
    assert execute_first_stage(run) == "failed"
    failed = Event.objects.get(run=run, type=Event.Type.FAILED)
    assert "returned dict, not StageOutput" in failed.payload["error"]
    assert not Checkpoint.objects.filter(run=run).exists()


def test_a_stage_that_raises_fails_the_run_with_the_exception_summary(checks):
    run = start_checks("raise")
    assert execute_first_stage(run) == "failed"
    assert run_status(run) == Run.Status.FAILED
    failed = Event.objects.get(run=run, type=Event.Type.FAILED)
    assert failed.payload["error"] == "RuntimeError: disk full on /scratch"
    assert failed.stage == "work"
    assert not Checkpoint.objects.filter(run=run).exists()


def test_a_verified_stage_seals_a_checkpoint_and_hands_the_next_stage_a_ticket(checks):
    run = start_checks("ok")
    assert execute_first_stage(run) == "verified"
    run.refresh_from_db()
    checkpoint = Checkpoint.objects.get(run=run, stage="work")
    assert checkpoint.next_stage == "finish"
    assert (run.current_stage, run.status) == ("finish", Run.Status.RUNNING)
    assert run.ticket and run.queued_at is not None


def test_a_worker_that_lost_its_lease_mid_stage_stops_at_its_next_write_having_written_nothing(
    checks,
):
    run = start_checks("takeover")
    assert execute_first_stage(run) == "lease-lost"
    started = Event.objects.get(run=run, type=Event.Type.STARTED)
    # Everything the fenced-out worker wrote came before the takeover: STARTED and the probe.
    by_token = Event.objects.filter(run=run, token=started.token)
    assert list(by_token.values_list("type", flat=True)) == [
        Event.Type.STARTED,
        Event.Type.TOOL_CALLED,
        Event.Type.TOOL_RESULT,
    ]
    assert Run.objects.get(pk=run.pk).last_seq == by_token.last().seq
    assert meter_count("stamp") == 0
    assert not Effect.objects.filter(run=run).exists()
    assert not Checkpoint.objects.filter(run=run).exists()
    assert run_status(run) == Run.Status.RUNNING  # the new holder decides, not the zombie


def test_a_second_delivery_of_the_same_stage_job_does_nothing(checks):
    run = start_checks("ok")
    run.refresh_from_db()
    ticket = run.ticket
    assert engine.execute(run.pk, "work", ticket) == "verified"
    events = Event.objects.filter(run=run).count()
    assert engine.execute(run.pk, "work", ticket) == "nothing-to-do"
    assert Event.objects.filter(run=run).count() == events
    assert meter_count("probe") == 1


def test_a_stale_job_finding_the_run_leased_gives_up_without_writing(checks):
    run = start_checks("ok")
    leases.acquire(run.pk, "worker:other", ttl=600)
    events = Event.objects.filter(run=run).count()
    # A redelivered job whose ticket is no longer the run's has nothing to wait for.
    assert engine.execute(run.pk, "work", "a-consumed-ticket", holder="worker:test") == "busy"
    assert Event.objects.filter(run=run).count() == events
    assert leases.current(run.pk).holder == "worker:other"


def test_every_event_of_a_stage_carries_the_token_of_the_lease_that_ran_it(checks):
    run = start_checks("ok")
    execute_first_stage(run)
    started = Event.objects.get(run=run, type=Event.Type.STARTED)
    tokens = set(Event.objects.filter(run=run, stage="work").values_list("token", flat=True))
    assert tokens == {started.token}
    assert started.token == leases.current(run.pk).token


# --- call hooks ----------------------------------------------------------------------------------


class RecordingHooks(CallHooks):
    def __init__(self, lose_answer: bool = False) -> None:
        self.seen: list[tuple] = []
        self.lose_answer = lose_answer

    def before_call(self, ctx, call_id: str) -> None:
        # The intent is already in the log when the hook runs.
        called = Event.objects.filter(run=ctx.run, type=Event.Type.TOOL_CALLED).count()
        self.seen.append(("before", call_id, called))

    def after_call(self, ctx, call_id: str, result) -> None:
        self.seen.append(("after", call_id, result))
        if self.lose_answer:
            raise OutcomeUnknown("the answer never arrived")


def test_hooks_passed_to_execute_run_around_each_tool_call(checks):
    run = start_checks("ok")
    run.refresh_from_db()
    hooks = RecordingHooks()
    assert engine.execute(run.pk, "work", run.ticket, holder="worker:test", hooks=hooks) == (
        "verified"
    )
    assert hooks.seen == [("before", "probe", 1), ("after", "probe", {"n": 1})]


def test_an_after_call_hook_that_raises_fails_the_stage_without_recording_the_result(checks):
    run = start_checks("ok")
    run.refresh_from_db()
    hooks = RecordingHooks(lose_answer=True)
    assert engine.execute(run.pk, "work", run.ticket, holder="worker:test", hooks=hooks) == (
        "failed"
    )
    assert meter_count("probe") == 1  # the call happened; its answer was lost
    assert not Event.objects.filter(run=run, type=Event.Type.TOOL_RESULT).exists()
    failed = Event.objects.get(run=run, type=Event.Type.FAILED)
    assert failed.payload["error"] == "OutcomeUnknown: the answer never arrived"
