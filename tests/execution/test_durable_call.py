"""The durable tool call's hot path (issue 10): a first attempt is two writes, the intent and
the outcome each written with its event; the call is fenced by the lease the worker holds,
not by a read; a taken delivery key falls back to reading the effect and deciding.

Stages run in-process through engine.execute on committed data (`transactional_db`: the
heartbeat thread has its own connection)."""

from __future__ import annotations

import pytest
from django.db import connection

from demo.models import SimCall
from demo.simulators import meter
from runs import engine
from runs.execution.hooks import CallHooks
from runs.ledger import effects, leases
from runs.ledger.append import Writer
from runs.ledger.effects import claim_intent
from runs.ledger.maintenance import maintenance
from runs.ledger.verify import verify_chain
from runs.models import Effect, Event, ReplayPolicy, Run
from runs.pipeline import Input, KeyParts, Pipeline, Stage, StageOutput, Tool
from tests.support.events import called
from tests.support.pipelines import registered

# --- a pipeline of one stage that makes `n` calls of one IDEMPOTENT tool ---------------------

# Statements the stage's calls made, collected by the stage itself around its calls only.
SEEN: list[str] = []


def _stamp(args: dict, key: str) -> dict:
    meter("stamp", "call", key[:32], billed=True)
    if args.get("empty"):
        return {"external_id": ""}  # a confirmation without an id: the database refuses it
    return {"external_id": f"stamp-{args['i']}"}


def _stamp_key(ctx, args: dict) -> KeyParts:
    # The batch input lets two runs share keys (a key another run already used).
    return KeyParts("acct", "stamps", f"{ctx.inputs['batch']}/{args['i']}", "1")


def _record(execute, sql, params, many, context):
    SEEN.append(sql)
    return execute(sql, params, many, context)


def _calls(ctx) -> StageOutput:
    with connection.execute_wrapper(_record):
        for i in range(int(ctx.inputs["n"])):
            ctx.call(f"stamp-{i}", "stamp", i=i, empty=ctx.inputs["empty"] == "yes")
    return StageOutput(outputs={"n": ctx.inputs["n"]})


durable = Pipeline(
    name="durable",
    inputs=(
        Input("n", lambda pinned: "3", versioned=False),
        Input("batch", lambda pinned: "b1", versioned=False),
        Input("empty", lambda pinned: "no", versioned=False),
    ),
    tools=(Tool("stamp", ReplayPolicy.IDEMPOTENT, _stamp, key=_stamp_key),),
    stages=(Stage("calls", _calls, consumes=("n", "batch", "empty"), tools=("stamp",)),),
)


@pytest.fixture
def pipeline(transactional_db, settings):
    with registered(settings, "tests.execution.test_durable_call.durable"):
        SEEN.clear()
        yield


def run_stage(**inputs: str) -> tuple[Run, str]:
    run = engine.start_run("durable", inputs, actor="test", enqueue=False)
    outcome = engine.execute(run.pk, "calls", run.ticket, holder="worker:test")
    run.refresh_from_db()
    return run, outcome


def statements_on(table: str, verb: str) -> int:
    return sum(1 for sql in SEEN if sql.lstrip().upper().startswith(verb) and table in sql)


EFFECT_TABLE = Effect._meta.db_table


def test_a_first_attempt_records_intent_and_outcome_with_their_events(pipeline):
    run, outcome = run_stage(n="3")
    assert outcome == "verified"
    effects = Effect.objects.filter(run=run).order_by("call_id")
    assert [(e.call_id, e.status, e.attempts, e.external_id) for e in effects] == [
        ("stamp-0", Effect.Status.CONFIRMED, 1, "stamp-0"),
        ("stamp-1", Effect.Status.CONFIRMED, 1, "stamp-1"),
        ("stamp-2", Effect.Status.CONFIRMED, 1, "stamp-2"),
    ]
    assert effects[0].result == {"external_id": "stamp-0"}
    assert effects[0].request == {"i": 0, "empty": False}
    for effect in effects:
        written = Event.objects.filter(run=run, idempotency_key=effect.delivery_key)
        assert list(written.values_list("type", flat=True)) == [
            Event.Type.TOOL_CALLED,
            Event.Type.TOOL_RESULT,
        ]
    assert SimCall.objects.filter(system="stamp").count() == 3
    assert verify_chain(run.pk).ok


def test_a_first_attempt_reads_neither_the_effect_nor_the_lease(pipeline):
    run, outcome = run_stage(n="3")
    assert outcome == "verified"
    # The claim is the intent's own INSERT and the outcome its UPDATE, one each per call; the
    # call is fenced by the lease this worker holds (leases.HeldLease), not by reading it.
    assert statements_on(EFFECT_TABLE, "SELECT") == 0
    assert statements_on(EFFECT_TABLE, "INSERT") + statements_on(EFFECT_TABLE, "WITH") >= 3
    assert not [sql for sql in SEEN if "SELECT" in sql.upper()[:10] and "lease" in sql.lower()]


@pytest.mark.postgres(reason="statements outside a transaction are the PostgreSQL path's")
def test_on_postgresql_a_first_attempt_is_two_statements_outside_any_transaction(pipeline):
    run, outcome = run_stage(n="4")
    assert outcome == "verified"
    calls = [sql for sql in SEEN if "demo_" not in sql]  # not the test target's own meter
    # Each write is one guarded statement run in autocommit: no BEGIN, no COMMIT, no read.
    assert len(calls) == 2 * 4, calls


def test_on_sqlite_a_first_attempt_is_two_transactions_of_five_statements(pipeline):
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's statements; PostgreSQL's two are pinned above")
    run, outcome = run_stage(n="4")
    assert outcome == "verified"
    calls = [sql.split(None, 2)[:2] for sql in SEEN if "demo_" not in sql]
    # The intent: its effect row claiming the key, its event, the head; the outcome: its
    # event, the head, the effect row. Each in its own IMMEDIATE transaction, no read.
    begin, insert, commit = ["BEGIN", "IMMEDIATE"], ["INSERT", "INTO"], ["COMMIT"]
    head, effect = ["UPDATE", '"runs_run"'], ["UPDATE", '"runs_effect"']
    assert calls == [begin, insert, insert, head, commit, begin, insert, head, effect, commit] * 4


def test_a_key_another_run_confirmed_is_reused_not_called_again(pipeline):
    first, _ = run_stage(n="2", batch="shared")
    second, outcome = run_stage(n="2", batch="shared")
    assert outcome == "verified"
    assert SimCall.objects.filter(system="stamp").count() == 2  # the first run's calls only
    assert Effect.objects.filter(run=second).count() == 0
    reused = Event.objects.filter(run=second, type=Event.Type.TOOL_RESULT)
    assert [e.payload.get("reused") for e in reused] == [True, True]
    assert not Event.objects.filter(run=second, type=Event.Type.TOOL_CALLED).exists()


def test_find_reads_the_effect_a_query_reads(pipeline):
    # effects.find() reads the row with its own SQL and the ORM's converters: every field,
    # JSON, decimal and timestamps included, must be what a queryset gives.
    run_stage(n="1", batch="found")
    stored = Effect.objects.get()
    with maintenance():  # values no call writes: set behind the ledger's back
        Effect.objects.filter(pk=stored.pk).update(
            cost="1.2500", result={"external_id": "x", "n": [1.5, None, "ü"]}
        )
    stored.refresh_from_db()
    found = effects.find(stored.delivery_key)
    names = [field.attname for field in Effect._meta.concrete_fields]
    assert [getattr(found, name) for name in names] == [getattr(stored, name) for name in names]
    assert not found._state.adding
    assert effects.find("no-such-key") is None


def test_claiming_a_taken_key_writes_nothing(pipeline):
    first, _ = run_stage(n="1", batch="taken")
    taken = Effect.objects.get(run=first)
    run = engine.start_run("durable", {"batch": "other"}, actor="test", enqueue=False)
    token = leases.acquire(run.pk, "worker:test")
    before = Run.objects.get(pk=run.pk).last_seq
    claimed = claim_intent(
        Writer(run.pk, token, "worker:test"),
        {
            "delivery_key": taken.delivery_key,
            "run": run,
            "stage": "calls",
            "call_id": "stamp-0",
            "tool": "stamp",
            "policy": ReplayPolicy.IDEMPOTENT,
            "target": "acct@stamps",
            "request_hash": taken.request_hash,
            "request": taken.request,
        },
        event=called(
            stage="calls", call="stamp-0", tool="stamp", idempotency_key=taken.delivery_key
        ),
    )
    assert claimed is None
    assert Run.objects.get(pk=run.pk).last_seq == before
    assert not Event.objects.filter(run=run, type=Event.Type.TOOL_CALLED).exists()
    assert Effect.objects.get(delivery_key=taken.delivery_key).attempts == 1


def test_an_outcome_the_database_refuses_leaves_no_result_event(pipeline):
    # A confirmation without an external id breaks the effect's check constraint: the outcome
    # and its event are one write, so neither lands and the effect stays an intent.
    run, outcome = run_stage(n="1", empty="yes")
    assert outcome == "failed"
    effect = Effect.objects.get(run=run)
    assert effect.status == Effect.Status.INTENT
    assert not Event.objects.filter(run=run, type=Event.Type.TOOL_RESULT).exists()
    assert Run.objects.get(pk=run.pk).status == Run.Status.FAILED
    assert verify_chain(run.pk).ok


# --- the held lease -----------------------------------------------------------------------------


def test_a_held_lease_past_its_deadline_refuses_the_call(pipeline):
    run = engine.start_run("durable", {}, actor="test", enqueue=False)
    held = leases.hold(run.pk, "worker:test")
    held.check()  # just taken: the worker may call
    # As if the process had been frozen for a whole TTL since its last renewal.
    held.deadline -= held.ttl
    with pytest.raises(leases.LeaseLost):
        held.check()


def test_a_renewal_refused_after_a_takeover_marks_the_held_lease_lost(pipeline):
    run = engine.start_run("durable", {}, actor="test", enqueue=False)
    held = leases.hold(run.pk, "worker:test")
    leases.acquire(run.pk, "sweeper", takeover=True)
    with pytest.raises(leases.LeaseLost):
        leases.renew_held(held)
    assert held.lost.is_set()
    with pytest.raises(leases.LeaseLost):
        held.check()


class TakenOverBeforeTheCall(CallHooks):
    """Between the intent and the call, another holder takes the lease over and the
    heartbeat's next renewal is refused, as it would be."""

    def before_call(self, ctx, call_id: str) -> None:
        leases.acquire(ctx.run.pk, "sweeper", takeover=True)
        with pytest.raises(leases.LeaseLost):
            leases.renew_held(ctx.held)


def test_a_worker_that_learns_its_lease_was_taken_over_makes_no_call(pipeline):
    run = engine.start_run("durable", {"n": "2"}, actor="test", enqueue=False)
    outcome = engine.execute(
        run.pk, "calls", run.ticket, holder="worker:test", hooks=TakenOverBeforeTheCall()
    )
    assert outcome == "lease-lost"
    assert SimCall.objects.filter(system="stamp").count() == 0
    assert list(Effect.objects.filter(run=run).values_list("status", flat=True)) == [
        Effect.Status.INTENT
    ]
    assert not Event.objects.filter(run=run, type=Event.Type.TOOL_RESULT).exists()
