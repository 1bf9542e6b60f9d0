"""A tool call's outcome sent without waiting for PostgreSQL's answer (issue 49): committed by
the server while the stage goes on, its answer read before the connection's next statement,
and a write it turns out not to have made written again, or refused with the lease, by the
next append (runs/ledger/append.py, resumer/postgresql/base.py).

Stages run in-process through engine.execute on committed data, with nobody observing the
connection (an execute_wrapper or a query log makes every write wait)."""

from __future__ import annotations

import pytest
from django.db import connection, transaction

from demo.models import SimCall
from demo.simulators import meter
from runs import engine
from runs.events import ToolCalled
from runs.execution.hooks import CallHooks
from runs.ledger import heads, leases
from runs.ledger.append import Writer, append
from runs.ledger.verify import verify_chain
from runs.models import Effect, Event, ReplayPolicy, Run
from runs.pipeline import Input, KeyParts, Pipeline, Stage, StageOutput, Tool
from tests.support.pipelines import registered

pytestmark = pytest.mark.postgres(reason="only PostgreSQL's writes are sent unanswered")

# What the stage saw of the connection after each call: whether a write was in flight, and
# the run's last_seq an ORM read returned right after.
after_calls: list[tuple[bool, int]] = []


def _stamp(args: dict, key: str) -> dict:
    meter("stamp", "call", key[:32], billed=True)
    if args.get("empty"):
        return {"external_id": ""}  # a confirmation without an id: the database refuses it
    return {"external_id": f"stamp-{args['i']}"}


def _key(ctx, args: dict) -> KeyParts:
    return KeyParts("acct", "stamps", f"{ctx.run_id}/{args['i']}", "1")


def _calls(ctx) -> StageOutput:
    for i in range(int(ctx.inputs["n"])):
        ctx.call(f"stamp-{i}", "stamp", i=i, empty=ctx.inputs["empty"] == "yes")
        in_flight = connection.in_flight is not None
        if ctx.inputs["then"] == "read":
            # The ORM's next statement reads the answer first, and sees the outcome.
            after_calls.append((in_flight, Run.objects.get(pk=ctx.run.pk).last_seq))
        elif ctx.inputs["then"] == "atomic":
            # Opening a transaction reads it first too (autocommit turned off).
            with transaction.atomic():
                after_calls.append(
                    (in_flight, Run.objects.select_for_update().get(pk=ctx.run.pk).last_seq)
                )
        elif ctx.inputs["then"] == "close":
            after_calls.append((in_flight, 0))
            connection.close()  # the answer never read: the next append asks the chain
    return StageOutput(outputs={"n": ctx.inputs["n"]})


unanswered = Pipeline(
    name="unanswered",
    inputs=(
        Input("n", lambda pinned: "3", versioned=False),
        Input("empty", lambda pinned: "no", versioned=False),
        Input("then", lambda pinned: "read", versioned=False),
    ),
    tools=(Tool("stamp", ReplayPolicy.IDEMPOTENT, _stamp, key=_key),),
    stages=(Stage("calls", _calls, consumes=("n", "empty", "then"), tools=("stamp",)),),
)


@pytest.fixture
def pipeline(transactional_db, settings):
    with registered(settings, "tests.ledger.test_unanswered_writes.unanswered"):
        after_calls.clear()
        yield


def run_stage(hooks: CallHooks | None = None, **inputs: str) -> tuple[Run, str]:
    run = engine.start_run("unanswered", inputs, actor="test", enqueue=False)
    outcome = engine.execute(run.pk, "calls", run.ticket, holder="worker:test", hooks=hooks)
    run.refresh_from_db()
    return run, outcome


def results(run: Run) -> list[str]:
    return list(
        Event.objects.filter(run=run, type=Event.Type.TOOL_RESULT)
        .order_by("seq")
        .values_list("payload__call", flat=True)
    )


def test_an_outcome_is_in_flight_after_the_call_and_read_before_the_next_statement(pipeline):
    run, outcome = run_stage(n="3")
    assert outcome == "verified"
    # Each call returned with its outcome sent and not answered; the ORM's read saw it
    # written: RUN_CREATED, STAGE_STARTED, then an intent and an outcome per call.
    first = Event.objects.get(run=run, type=Event.Type.TOOL_CALLED, payload__call="stamp-0").seq
    assert after_calls == [(True, first + 1), (True, first + 3), (True, first + 5)]
    assert connection.in_flight is None
    assert list(
        Effect.objects.filter(run=run).order_by("call_id").values_list("status", "external_id")
    ) == [  # fmt: skip
        (Effect.Status.CONFIRMED, "stamp-0"),
        (Effect.Status.CONFIRMED, "stamp-1"),
        (Effect.Status.CONFIRMED, "stamp-2"),
    ]
    assert results(run) == ["stamp-0", "stamp-1", "stamp-2"]
    assert verify_chain(run.pk).ok


def test_a_transaction_the_stage_opens_after_a_call_reads_the_outcome_first(pipeline):
    run, outcome = run_stage(n="2", then="atomic")
    assert outcome == "verified"
    first = Event.objects.get(run=run, type=Event.Type.TOOL_CALLED, payload__call="stamp-0").seq
    assert after_calls == [(True, first + 1), (True, first + 3)]
    assert results(run) == ["stamp-0", "stamp-1"]
    assert verify_chain(run.pk).ok


def test_an_outcome_the_database_refuses_fails_the_stage_at_the_next_write(pipeline):
    # A confirmation without an external id breaks the effect's check constraint: sent, it
    # wrote nothing; written again by the stage's next append, it fails the stage there, and
    # no second call is made.
    run, outcome = run_stage(n="2", empty="yes", then="none")
    assert outcome == "failed"
    assert SimCall.objects.filter(system="stamp").count() == 1
    assert list(Effect.objects.filter(run=run).values_list("status", flat=True)) == [
        Effect.Status.INTENT
    ]
    assert results(run) == []
    assert Run.objects.get(pk=run.pk).status == Run.Status.FAILED
    assert verify_chain(run.pk).ok


class TakenOverAfterTheCall(CallHooks):
    """After the first call returns and before its outcome is sent, another holder takes
    the lease over: the outcome sent writes nothing."""

    def after_call(self, ctx, call_id: str, result) -> None:
        if call_id == "stamp-0":
            leases.acquire(ctx.run.pk, "sweeper", takeover=True)


def test_an_outcome_sent_after_a_takeover_stops_the_stage_before_its_next_call(pipeline):
    run, outcome = run_stage(TakenOverAfterTheCall(), n="2", then="none")
    assert outcome == "lease-lost"
    # The second call's intent settled the first's outcome: refused with the lease, it
    # raised LeaseLost and wrote nothing, so the second call was never made.
    assert SimCall.objects.filter(system="stamp").count() == 1
    assert list(Effect.objects.filter(run=run).values_list("call_id", "status")) == [
        ("stamp-0", Effect.Status.INTENT)
    ]
    assert results(run) == []
    assert verify_chain(run.pk).ok


class StaleHead(CallHooks):
    """Before the second call's outcome is sent, this process's knowledge of the head goes
    back to what it was after the first call's intent, as if someone it does not know of had
    written since: the outcome's guarded write chains to the wrong head and writes nothing."""

    def __init__(self) -> None:
        self.stale = None

    def after_call(self, ctx, call_id: str, result) -> None:
        token = ctx.writer.token
        if call_id == "stamp-0":
            self.stale = heads.known(connection.alias, ctx.run.pk, token)
        elif call_id == "stamp-1":
            heads.remember(connection.alias, token, self.stale, committed=True)


def test_an_outcome_that_wrote_nothing_under_a_held_lease_is_written_again(pipeline):
    run, outcome = run_stage(StaleHead(), n="3", then="none")
    assert outcome == "verified"
    assert results(run) == ["stamp-0", "stamp-1", "stamp-2"]
    assert set(Effect.objects.filter(run=run).values_list("status", flat=True)) == {
        Effect.Status.CONFIRMED
    }
    assert verify_chain(run.pk).ok


def test_an_outcome_whose_answer_was_lost_with_the_connection_is_not_written_twice(pipeline):
    run, outcome = run_stage(n="2", then="close")
    assert outcome == "verified"
    assert after_calls == [(True, 0), (True, 0)]
    # The server committed each before it read the connection's end; the next append found
    # it in the chain and chained to it.
    assert results(run) == ["stamp-0", "stamp-1"]
    assert set(Effect.objects.filter(run=run).values_list("status", flat=True)) == {
        Effect.Status.CONFIRMED
    }
    assert verify_chain(run.pk).ok


def test_an_observed_connection_waits_for_every_answer(pipeline):
    seen: list[str] = []

    def record(execute, sql, params, many, context):
        seen.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        run, outcome = run_stage(n="2")
    assert outcome == "verified"
    assert [in_flight for in_flight, _ in after_calls] == [False, False]
    assert results(run) == ["stamp-0", "stamp-1"]


def test_another_writers_write_refused_with_its_lease_does_not_refuse_this_writers(pipeline):
    # A job that ended with run A's write in flight, its lease taken over meanwhile: the next
    # job's appends (run B, on the same connection) write, and A's write is left to A's new
    # holder, not raised as B's LeaseLost.
    a, b = (engine.start_run("unanswered", {}, actor="test", enqueue=False) for _ in range(2))
    writers = []
    for run in (a, b):
        token = leases.acquire(run.pk, f"worker:{run.pk}")
        heads.run_for_writer(run.pk, token)  # the head known, as a worker knows it
        writers.append(Writer(run.pk, token, "test"))
    leases.acquire(a.pk, "sweeper", takeover=True)

    def looked(n: int) -> ToolCalled:
        return ToolCalled(stage="calls", call=f"look-{n}", tool="stamp", policy="SAFE", args={})

    assert append(writers[0], looked(0), flush=False, wait=False) is None
    assert connection.in_flight is not None
    append(writers[1], looked(1))
    append(writers[1], looked(2))
    called = Event.objects.filter(type=Event.Type.TOOL_CALLED)
    assert list(called.filter(run=b).values_list("payload__call", flat=True)) == [
        "look-1",
        "look-2",
    ]
    assert not called.filter(run=a).exists()
    assert verify_chain(a.pk).ok and verify_chain(b.pk).ok


def test_nothing_is_sent_unanswered_inside_a_transaction(pipeline):
    # Its commit answers for everything in it: a statement there waits for its answer.
    with transaction.atomic():
        assert connection.send_unanswered("SELECT %s", [1]) is None
    sent = connection.send_unanswered("SELECT %s", [1])
    assert sent is not None and connection.in_flight is sent
    assert Run.objects.count() == 0  # the ORM's statement reads the answer first
    assert connection.in_flight is None and sent.wrote is True
