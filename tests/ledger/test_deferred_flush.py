"""Which commits wait for the disk (issue 10): an effect's intent, a stage boundary and a stop
always do; a SAFE call's events, a confirmed outcome and a memoized re-use need not, since
losing them in a database crash leaves a state the protocol already recovers from (as if the
worker had died just before the write). On PostgreSQL such a write turns off
synchronous_commit for its own transaction; SQLite's settings never wait for the disk.

Stages run in-process through engine.execute on committed data (`transactional_db`)."""

from __future__ import annotations

import contextlib

import pytest
from django.db import connection, connections, transaction

from runs import engine
from runs.ledger import leases
from runs.ledger.append import HeadLost, Writer, append
from runs.ledger.maintenance import maintenance
from runs.ledger.verify import verify_chain
from runs.models import Event, ReplayPolicy, Run
from runs.pipeline import Input, KeyParts, Pipeline, Stage, StageOutput, Tool
from tests.support.pipelines import registered

on_postgresql = pytest.mark.skipif(
    "connection.vendor != 'postgresql'", reason="SQLite's commits never wait for the disk"
)

# (event type, whether its statement turned synchronous_commit off) for every statement that
# writes an event, in the order the stage's worker sent them.
WRITES: list[tuple[str, bool]] = []


def _look(args: dict, key: str) -> dict:
    return {"external_id": f"look-{args['i']}"}


def _stamp(args: dict, key: str) -> dict:
    return {"external_id": f"stamp-{args['i']}"}


def _calls(ctx) -> StageOutput:
    ctx.call("look-0", "look", i=0)
    ctx.call("stamp-0", "stamp", i=0)
    return StageOutput(outputs={"done": "yes"})


flushing = Pipeline(
    name="flushing",
    inputs=(Input("batch", lambda pinned: "b1", versioned=False),),
    tools=(
        Tool("look", ReplayPolicy.SAFE, _look),
        Tool(
            "stamp",
            ReplayPolicy.IDEMPOTENT,
            _stamp,
            key=lambda ctx, a: KeyParts("acct", "stamps", f"{ctx.inputs['batch']}/{a['i']}", "1"),
        ),
    ),
    stages=(Stage("calls", _calls, consumes=("batch",), tools=("look", "stamp")),),
)

EVENT_TYPES = set(Event.Type.values)


def _record(execute, sql, params, many, context):
    types = [p for p in params or () if isinstance(p, str) and p in EVENT_TYPES]
    if types and sql.lstrip().upper().startswith(("WITH", "INSERT")):
        WRITES.append((types[0], "synchronous_commit" in sql))
    return execute(sql, params, many, context)


@pytest.fixture
def pipeline(transactional_db, settings):
    with registered(settings, "tests.ledger.test_deferred_flush.flushing"):
        WRITES.clear()
        yield


def run_stage(**inputs: str) -> Run:
    run = engine.start_run("flushing", inputs, actor="test", enqueue=False)
    with connection.execute_wrapper(_record):
        outcome = engine.execute(run.pk, "calls", run.ticket, holder="worker:test")
    assert outcome == "verified"
    return run


def held_writer() -> tuple[Run, Writer]:
    run = engine.start_run("flushing", {}, actor="test", enqueue=False)
    return run, Writer(run.pk, leases.acquire(run.pk, "worker:test"), "worker:test")


@on_postgresql
def test_only_writes_the_protocol_recovers_from_skip_the_wait_for_the_disk(pipeline):
    run_stage()
    assert WRITES == [
        (Event.Type.STARTED, False),
        (Event.Type.TOOL_CALLED, True),  # the SAFE call, before
        (Event.Type.TOOL_RESULT, True),  # the SAFE call, after
        (Event.Type.TOOL_CALLED, False),  # the intent: on disk before the call
        (Event.Type.TOOL_RESULT, True),  # the confirmed outcome
        (Event.Type.VERIFIED, False),
        (Event.Type.SUCCEEDED, False),
    ]


@on_postgresql
def test_with_deferred_flush_off_every_commit_waits_for_the_disk(pipeline, settings):
    settings.RESUMER_DEFER_FLUSH = False
    run_stage()
    assert len(WRITES) == 7
    assert not [write for write in WRITES if write[1]]


@on_postgresql
def test_a_reuse_of_a_confirmed_effect_skips_the_wait_for_the_disk(pipeline):
    run_stage(batch="shared")
    WRITES.clear()
    second = run_stage(batch="shared")  # the stamp's key is confirmed: re-used, not called
    assert WRITES == [
        (Event.Type.STARTED, False),
        (Event.Type.TOOL_CALLED, True),
        (Event.Type.TOOL_RESULT, True),
        (Event.Type.TOOL_CALLED, False),  # the claim, tried: the key is taken, nothing written
        (Event.Type.TOOL_RESULT, True),  # the re-use
        (Event.Type.VERIFIED, False),
        (Event.Type.SUCCEEDED, False),
    ]
    keyed = Event.objects.filter(run=second).exclude(idempotency_key="")
    assert [(e.type, e.payload.get("reused")) for e in keyed] == [(Event.Type.TOOL_RESULT, True)]


def synchronous_commit_around(writer: Writer, **append_kwargs) -> tuple[str, str]:
    """synchronous_commit inside the transaction an append ran in, and after it. The
    transaction is one Django does not know of, so append() still writes as in autocommit."""
    append(writer, Event.Type.TOOL_RESULT, stage="calls", payload={"n": 1})  # knows the head
    with connection.cursor() as cursor:
        cursor.execute("BEGIN")
        append(writer, Event.Type.TOOL_RESULT, stage="calls", payload={"n": 2}, **append_kwargs)
        cursor.execute("SELECT current_setting('synchronous_commit')")
        inside = cursor.fetchone()[0]
        cursor.execute("COMMIT")
        cursor.execute("SELECT current_setting('synchronous_commit')")
        return inside, cursor.fetchone()[0]


@on_postgresql
def test_a_deferred_append_turns_off_synchronous_commit_for_its_own_transaction(pipeline):
    run, writer = held_writer()
    assert synchronous_commit_around(writer, flush=False) == ("off", "on")


@on_postgresql
def test_a_flushed_append_leaves_synchronous_commit_on(pipeline):
    run, writer = held_writer()
    inside, _ = synchronous_commit_around(writer)
    assert inside == "on"


def test_a_deferred_append_is_committed_for_every_other_connection(pipeline):
    run, writer = held_writer()
    append(writer, Event.Type.TOOL_RESULT, stage="calls", payload={"n": 1})
    event = append(writer, Event.Type.TOOL_RESULT, stage="calls", payload={"n": 2}, flush=False)
    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:
            cursor.execute(f"SELECT seq FROM {Event._meta.db_table} WHERE id = %s", [event.pk])
            assert cursor.fetchone() == (event.seq,)
    finally:
        other.close()
    assert Run.objects.get(pk=run.pk).last_seq == event.seq


# --- a writer whose writes were lost ----------------------------------------------------------


def lose_last_event(run: Run) -> None:
    """What a database crash does to an append that did not wait for the disk: the event is
    gone and the run's head is where it was before it."""
    last, before = Event.objects.filter(run=run).order_by("-seq")[:2]
    with maintenance(), connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {Event._meta.db_table} WHERE id = %s", [last.pk])
        Run.objects.filter(pk=run.pk).update(last_seq=before.seq, head_hash=before.hash)


def test_a_writer_whose_committed_write_was_lost_writes_nothing_more(pipeline):
    run, writer = held_writer()
    append(writer, Event.Type.TOOL_RESULT, stage="calls", payload={"n": 1})
    append(writer, Event.Type.TOOL_RESULT, stage="calls", payload={"n": 2}, flush=False)
    lose_last_event(run)
    with pytest.raises(HeadLost, match="its last writes were lost"):
        append(writer, Event.Type.TOOL_RESULT, stage="calls", payload={"n": 3})
    assert list(Event.objects.filter(run=run).values_list("payload", flat=True))[-1] == {"n": 1}
    assert Run.objects.get(pk=run.pk).last_seq == Event.objects.filter(run=run).count()


def test_a_write_rolled_back_with_its_callers_transaction_is_not_taken_for_a_lost_one(pipeline):
    run, writer = held_writer()
    append(writer, Event.Type.TOOL_RESULT, stage="calls", payload={"n": 1})
    with contextlib.suppress(RuntimeError), transaction.atomic():
        append(writer, Event.Type.TOOL_RESULT, stage="calls", payload={"n": 2})
        raise RuntimeError("the caller's transaction fails after the append")
    event = append(writer, Event.Type.TOOL_RESULT, stage="calls", payload={"n": 3})
    assert event.payload == {"n": 3}
    assert Run.objects.get(pk=run.pk).last_seq == event.seq
    assert verify_chain(run.pk).ok
