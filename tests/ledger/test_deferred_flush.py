"""Which commits wait for the disk (issue 10): an effect's intent, a stage boundary and a stop
always do; a SAFE call's events, a confirmed outcome and a memoized re-use need not, since
losing them in a database crash leaves a state the protocol already recovers from (as if the
worker had died just before the write). On PostgreSQL such a write turns off
synchronous_commit for its own transaction; on SQLite it commits at NORMAL where the
connection's commits wait for the disk (FULL), and at NORMAL nothing waits anyway. An
HTTP tool's result or outcome is written in a transaction with its exchanges (issue 29):
deferred_commit() says the whole transaction need not wait.

Stages run in-process through engine.execute on committed data (`transactional_db`)."""

from __future__ import annotations

import contextlib

import pytest
from django.conf import settings as django_settings
from django.db import connection, connections, transaction

from runs import engine
from runs.ledger import leases
from runs.ledger.append import HeadLost, LedgerError, Writer, append, deferred_commit
from runs.ledger.maintenance import maintenance
from runs.ledger.verify import verify_chain
from runs.models import Artifact, Event, ReplayPolicy, Run
from runs.pipeline import Input, KeyParts, Pipeline, Stage, StageOutput, Tool
from runs.tools.http import http_tool
from tests.support.events import result
from tests.support.pipelines import registered

on_postgresql = pytest.mark.postgres(reason="synchronous_commit is PostgreSQL's")

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


def _http_calls(ctx) -> StageOutput:
    ctx.call("look-0", "health")
    ctx.call("render-0", "render", prompt=f"cover of {ctx.root_id}")
    return StageOutput(outputs={"done": "yes"})


def _service_url() -> str:
    return django_settings.DEMO_SERVICE_URL


flushing_http = Pipeline(
    name="flushing-http",
    tools=(
        http_tool("health", ReplayPolicy.SAFE, method="GET", url="/_health", base_url=_service_url),
        http_tool(
            "render",
            ReplayPolicy.IDEMPOTENT,
            url="/v1/renders",
            base_url=_service_url,
            body=lambda args, key: {"prompt": args["prompt"]},
            key=lambda ctx, a: KeyParts("acct", "renderer", f"{ctx.root_id}/cover", "1"),
            external_id="id",
            target="renderer",
        ),
    ),
    stages=(Stage("calls", _http_calls, tools=("health", "render")),),
)

EVENT_TYPES = set(Event.Type.values)
# synchronous_commit as the transaction of each event written inside one (not in autocommit)
# will commit with it: read right after the event's statement, in the same transaction.
COMMITTED_WITH: list[tuple[str, str]] = []


def _record(execute, sql, params, many, context):
    types = [p for p in params or () if isinstance(p, str) and p in EVENT_TYPES]
    writes = types and sql.lstrip().upper().startswith(("WITH", "INSERT"))
    if writes:
        WRITES.append((types[0], "synchronous_commit" in sql))
    result = execute(sql, params, many, context)
    if writes and not context["connection"].get_autocommit():
        with context["connection"].connection.cursor() as raw:
            raw.execute("SELECT current_setting('synchronous_commit')")
            COMMITTED_WITH.append((types[0], raw.fetchone()[0]))
    return result


def commits_wait_as_deployed() -> None:
    """The suite turns synchronous_commit off for its connections (pyproject.toml's
    PGOPTIONS); here it is on again, as a deployment has it, on the connection the tests
    read it on, so what a deferred write turns off, and back, is what a deployment sees."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET synchronous_commit = on")


@pytest.fixture
def pipeline(transactional_db, settings):
    commits_wait_as_deployed()
    with registered(settings, "tests.ledger.test_deferred_flush.flushing"):
        WRITES.clear()
        COMMITTED_WITH.clear()
        yield


@pytest.fixture
def http_pipeline(transactional_db, settings, demo_service):
    settings.DEMO_SERVICE_URL = demo_service.url
    # Every body an artifact row, written in the event's transaction.
    settings.RESUMER_HTTP_INLINE_BODY_BYTES = 0
    commits_wait_as_deployed()
    with registered(settings, "tests.ledger.test_deferred_flush.flushing_http"):
        WRITES.clear()
        COMMITTED_WITH.clear()
        yield


def run_stage(pipeline: str = "flushing", **inputs: str) -> Run:
    run = engine.start_run(pipeline, inputs, actor="test", enqueue=False)
    with connection.execute_wrapper(_record):
        outcome = engine.execute(run.pk, "calls", run.ticket, holder="worker:test")
    assert outcome == "verified"
    return run


def held_writer() -> tuple[Run, Writer]:
    run = engine.start_run("flushing", {}, actor="test", enqueue=False)
    return run, Writer(run.pk, leases.acquire(run.pk, "worker:test"), "worker:test")


@on_postgresql
def test_only_writes_the_protocol_recovers_from_skip_the_wait_for_the_disk(pipeline):
    run = run_stage()
    assert WRITES == [
        (Event.Type.STARTED, False),
        (Event.Type.TOOL_CALLED, True),  # the SAFE call, before
        (Event.Type.TOOL_RESULT, True),  # the SAFE call, after
        (Event.Type.TOOL_CALLED, False),  # the intent: on disk before the call
        (Event.Type.TOOL_RESULT, True),  # the confirmed outcome
        (Event.Type.VERIFIED, False),  # SUCCEEDED follows it in its statement (issue 28)
    ]
    assert list(Event.objects.filter(run=run).values_list("type", flat=True))[-2:] == [
        Event.Type.VERIFIED,
        Event.Type.SUCCEEDED,
    ]


@on_postgresql
def test_with_deferred_flush_off_every_commit_waits_for_the_disk(pipeline, settings):
    settings.RESUMER_DEFER_FLUSH = False
    run_stage()
    assert len(WRITES) == 6
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
        (Event.Type.VERIFIED, False),  # SUCCEEDED follows it in its statement (issue 28)
    ]
    keyed = Event.objects.filter(run=second).exclude(idempotency_key="")
    assert [(e.type, e.payload.get("reused")) for e in keyed] == [(Event.Type.TOOL_RESULT, True)]


@on_postgresql
def test_an_http_tools_result_and_outcome_commit_with_their_exchanges_without_waiting(
    http_pipeline,
):
    run = run_stage("flushing-http")
    assert WRITES == [
        (Event.Type.STARTED, False),
        (Event.Type.TOOL_CALLED, True),  # the SAFE call, before
        (Event.Type.TOOL_RESULT, True),  # the SAFE call's result, with its exchanges
        (Event.Type.TOOL_CALLED, False),  # the intent: on disk before the call
        (Event.Type.TOOL_RESULT, True),  # the confirmed outcome, with its exchanges
        (Event.Type.VERIFIED, False),  # SUCCEEDED follows it in its statement (issue 28)
    ]
    # The two results' transactions commit with synchronous_commit off, their exchanges'
    # artifact rows with them; the stage's boundaries wait (STARTED, and VERIFIED with
    # SUCCEEDED, are statements of their own in autocommit, which WRITES shows do not turn
    # the setting off).
    assert COMMITTED_WITH == [
        (Event.Type.TOOL_RESULT, "off"),
        (Event.Type.TOOL_RESULT, "off"),
    ]
    assert Artifact.objects.filter(name__startswith=f"http/{run.public_id}/calls/").count() >= 2
    assert verify_chain(run.pk).ok


@on_postgresql
def test_with_deferred_flush_off_an_http_tools_outcome_waits_for_the_disk(http_pipeline, settings):
    settings.RESUMER_DEFER_FLUSH = False
    run_stage("flushing-http")
    assert len(WRITES) == 6
    assert not [write for write in WRITES if write[1]]
    assert {setting for _, setting in COMMITTED_WITH} == {"on"}


def synchronous_commit_around(writer: Writer, **append_kwargs) -> tuple[str, str]:
    """synchronous_commit inside the transaction an append ran in, and after it. The
    transaction is one Django does not know of, so append() still writes as in autocommit."""
    append(writer, result(1, "calls"))  # knows the head
    with connection.cursor() as cursor:
        cursor.execute("BEGIN")
        append(writer, result(2, "calls"), **append_kwargs)
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


def synchronous_commit_in_deferred_commit(writer: Writer) -> tuple[str, str]:
    """synchronous_commit inside a deferred_commit() an append ran in, and after it."""
    with deferred_commit(), connection.cursor() as cursor:
        append(writer, result(2, "calls"), flush=False)
        cursor.execute("SELECT current_setting('synchronous_commit')")
        inside = cursor.fetchone()[0]
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('synchronous_commit')")
        return inside, cursor.fetchone()[0]


@on_postgresql
def test_a_deferred_commit_turns_off_synchronous_commit_for_its_whole_transaction(pipeline):
    run, writer = held_writer()
    append(writer, result(1, "calls"))  # knows the head
    assert synchronous_commit_in_deferred_commit(writer) == ("off", "on")


@on_postgresql
def test_a_deferred_commit_whose_append_takes_the_locked_path_turns_it_off_too(pipeline):
    run, writer = held_writer()  # this process has written nothing under the token yet
    assert synchronous_commit_in_deferred_commit(writer) == ("off", "on")


@on_postgresql
def test_a_deferred_commit_inside_a_transaction_leaves_its_commit_to_wait(pipeline, settings):
    run, writer = held_writer()
    append(writer, result(1, "calls"))
    with transaction.atomic():
        assert synchronous_commit_in_deferred_commit(writer)[0] == "on"
    settings.RESUMER_DEFER_FLUSH = False
    assert synchronous_commit_in_deferred_commit(writer)[0] == "on"


def test_a_write_that_must_wait_has_no_place_in_a_deferred_commit(pipeline):
    run, writer = held_writer()
    append(writer, result(1, "calls"))
    with pytest.raises(LedgerError, match="must wait for the disk"), deferred_commit():
        append(writer, result(2, "calls"))
    assert list(Event.objects.filter(run=run).values_list("payload", flat=True))[-1] == (
        result(1, "calls").to_payload()
    )


def test_a_deferred_append_is_committed_for_every_other_connection(pipeline):
    run, writer = held_writer()
    append(writer, result(1, "calls"))
    event = append(writer, result(2, "calls"), flush=False)
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
    append(writer, result(1, "calls"))
    append(writer, result(2, "calls"), flush=False)
    lose_last_event(run)
    with pytest.raises(HeadLost, match="its last writes were lost"):
        append(writer, result(3, "calls"))
    assert list(Event.objects.filter(run=run).values_list("payload", flat=True))[-1] == (
        result(1, "calls").to_payload()
    )
    assert Run.objects.get(pk=run.pk).last_seq == Event.objects.filter(run=run).count()


def test_a_write_rolled_back_with_its_callers_transaction_is_not_taken_for_a_lost_one(pipeline):
    run, writer = held_writer()
    append(writer, result(1, "calls"))
    with contextlib.suppress(RuntimeError), transaction.atomic():
        append(writer, result(2, "calls"))
        raise RuntimeError("the caller's transaction fails after the append")
    event = append(writer, result(3, "calls"))
    assert event.payload == result(3, "calls").to_payload()
    assert Run.objects.get(pk=run.pk).last_seq == event.seq
    assert verify_chain(run.pk).ok


# --- SQLite whose commits wait for the disk (RESUMER_SQLITE_SYNCHRONOUS=FULL) ----------------

on_sqlite = pytest.mark.skipif(
    connection.vendor != "sqlite", reason="SQLite's synchronous level is SQLite's"
)
# The level each event-writing statement's transaction commits at, as the connection was told
# with PRAGMA synchronous (FULL until told otherwise), seen by the driver itself: the ledger
# says its PRAGMAs on the driver's connection, past Django's cursor.
LEVELS: list[tuple[str, str]] = []


def _record_level(sql: str) -> None:
    said = sql.strip().upper()
    if said.startswith("PRAGMA SYNCHRONOUS="):
        LEVELS.append(("", said.split("=", 1)[1]))
    elif said.startswith('INSERT INTO "RUNS_EVENT"'):
        # The driver hands the statement with its values in place: the type is one of them.
        (event_type,) = [t for t in EVENT_TYPES if f"'{t}'" in sql]
        level = next((lvl for typ, lvl in reversed(LEVELS) if not typ), "FULL")
        LEVELS.append((event_type, "NORMAL" if level in ("NORMAL", "1") else "FULL"))


@contextlib.contextmanager
def recording_levels():
    connection.ensure_connection()
    raw = connection.connection
    raw.set_trace_callback(_record_level)
    try:
        yield
    finally:
        raw.set_trace_callback(None)


@pytest.fixture
def sqlite_full(pipeline):
    """The test's connection made again as RESUMER_SQLITE_SYNCHRONOUS=FULL makes it."""
    options = connection.settings_dict["OPTIONS"]
    said = options["init_command"]
    options["init_command"] = said.replace("synchronous=NORMAL", "synchronous=FULL")
    connection.close()
    LEVELS.clear()
    try:
        yield
    finally:
        options["init_command"] = said
        connection.close()


def synchronous_level() -> int:
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA synchronous")
        return cursor.fetchone()[0]


@on_sqlite
def test_on_sqlite_at_full_only_writes_the_protocol_recovers_from_skip_the_flush(sqlite_full):
    run = engine.start_run("flushing", {}, actor="test", enqueue=False)
    assert synchronous_level() == 2
    with recording_levels():
        assert engine.execute(run.pk, "calls", run.ticket, holder="worker:test") == "verified"
    assert [write for write in LEVELS if write[0]] == [
        (Event.Type.STARTED, "FULL"),
        (Event.Type.TOOL_CALLED, "NORMAL"),  # the SAFE call, before
        (Event.Type.TOOL_RESULT, "NORMAL"),  # the SAFE call, after
        (Event.Type.TOOL_CALLED, "FULL"),  # the intent: on disk before the call
        (Event.Type.TOOL_RESULT, "NORMAL"),  # the confirmed outcome
        (Event.Type.VERIFIED, "FULL"),
        (Event.Type.SUCCEEDED, "FULL"),  # in VERIFIED's transaction
    ]
    assert synchronous_level() == 2  # the connection's own level again
    assert verify_chain(run.pk).ok


@on_sqlite
def test_on_sqlite_at_full_with_deferred_flush_off_every_commit_waits(sqlite_full, settings):
    settings.RESUMER_DEFER_FLUSH = False
    run = engine.start_run("flushing", {}, actor="test", enqueue=False)
    with recording_levels():
        engine.execute(run.pk, "calls", run.ticket, holder="worker:test")
    assert len([write for write in LEVELS if write[0]]) == 7
    assert {level for _, level in LEVELS} == {"FULL"}


@on_sqlite
def test_on_sqlite_at_full_a_deferred_commit_commits_at_normal(sqlite_full):
    run, writer = held_writer()
    append(writer, result(1, "calls"))
    with deferred_commit():
        append(writer, result(2, "calls"), flush=False)
        inside = synchronous_level()
    assert (inside, synchronous_level()) == (1, 2)
    assert Run.objects.get(pk=run.pk).last_seq == Event.objects.filter(run=run).count()


@on_sqlite
def test_on_sqlite_at_normal_no_write_says_its_level(pipeline):
    run = engine.start_run("flushing", {}, actor="test", enqueue=False)
    LEVELS.clear()
    with recording_levels():
        engine.execute(run.pk, "calls", run.ticket, holder="worker:test")
    assert [level for event, level in LEVELS if not event] == []
