"""The one append path: what it writes, what it refuses, and how the hash chain catches edits.

These run in-process on the test's own connection: nothing here needs another process to see
the data, so the `db` fixture's rollback keeps them fast.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json

import pytest
from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.test import override_settings

from runs.events import Resumed, RunCreated, Succeeded, ToolResult, Verified
from runs.ledger import artifacts, leases
from runs.ledger.append import LeaseLost, LedgerError, RunMove, Writer, append, create_run
from runs.ledger.chain import canonical_json, event_hash, hashed_content
from runs.ledger.checkpoints import write_checkpoint
from runs.ledger.maintenance import maintenance
from runs.ledger.sql.shapes import EffectClaim
from runs.ledger.verify import verify_chain
from runs.models import Artifact, Checkpoint, Effect, Event, Run
from tests.support.events import called, result, started
from tests.support.plans import change_manifest


def new_run() -> Run:
    return create_run(
        "content",
        RunCreated(input_versions={"topic": "resumable-agents", "facts": "v3"}),
        actor="test",
        first_stage="research",
    )


def writer_for(run: Run, holder: str = "writer:test") -> Writer:
    return Writer(run.pk, leases.acquire(run.pk, holder), holder)


def event_count(run: Run) -> int:
    return Event.objects.filter(run=run).count()


@pytest.fixture
def run(db) -> Run:
    return new_run()


@pytest.fixture
def writer(run: Run) -> Writer:
    return writer_for(run)


def test_create_run_writes_run_created_as_seq_one(run):
    event = Event.objects.get(run=run)
    assert (event.seq, event.type, event.token, event.prev_hash) == (
        1,
        Event.Type.RUN_CREATED,
        None,
        "",
    )
    run.refresh_from_db()
    assert (run.last_seq, run.head_hash) == (1, event.hash)


def test_append_assigns_the_next_seq_and_links_the_hash(run, writer):
    first = Event.objects.get(run=run, seq=1)
    appended = append(writer, started("research"))
    stored = Event.objects.get(pk=appended.pk)
    assert stored.seq == 2
    assert stored.prev_hash == first.hash
    assert stored.token == writer.token
    run.refresh_from_db()
    assert (run.last_seq, run.head_hash) == (2, stored.hash)


def test_the_event_append_returns_is_the_row_a_query_returns(run, writer):
    # Every column filled: a call's result under its key, a stage's input versions and
    # artifacts.
    for event in (
        result(1, idempotency_key="k" * 64, result={"title": "Grüße ✓", "n": [1, 2.5, None]}),
        Verified(
            stage="research",
            input_versions={"facts": "v3"},
            artifact_refs=["artifact://facts/v3"],
            rules=[],
            next_stage="draft",
            manifest_sha256="0" * 64,
            usage={},
        ),
    ):
        appended = append(writer, event)
        stored = Event.objects.get(pk=appended.pk)
        names = [field.attname for field in Event._meta.concrete_fields]
        assert [getattr(appended, n) for n in names] == [getattr(stored, n) for n in names]
        assert not appended._state.adding


def test_the_append_hash_is_the_hash_verify_chain_recomputes(run, writer):
    # The append path hashes the canonical text it inserts (chain.encoded_event_hash);
    # verify_chain re-encodes the stored row (hashed_content). Unicode, nesting, numbers,
    # a null token and a stored payload must all come out the same.
    append(writer, result(1, result={"z": 1, "a": {"y": [1, "ö"]}}))
    append(writer, called(2, args={"big": "x" * 70_000}))
    append(writer, result(3, result={"f": 0.1, "t": True}))
    for event in Event.objects.filter(run=run):
        assert event.hash == event_hash(event.prev_hash, hashed_content(event)), event.seq
    assert verify_chain(run.pk).ok


def test_an_append_that_moves_only_the_head_leaves_updated_at(run, writer):
    # updated_at orders the inbox by when a run's state changed; a tool call's event does
    # not change it (and does not rewrite the inbox indexes).
    append(writer, started("research"), move=RunMove(Run.Status.RUNNING))
    running = Run.objects.get(pk=run.pk)
    append(writer, called(1, "research"))
    after_call = Run.objects.get(pk=run.pk)
    assert after_call.updated_at == running.updated_at
    assert (after_call.version, after_call.last_seq) == (running.version + 1, running.last_seq + 1)


def test_an_append_that_moves_the_run_stamps_updated_at(run, writer):
    before = Run.objects.get(pk=run.pk).updated_at
    with connection.cursor() as cursor:
        # Back-date it, so a later clock reading cannot equal it.
        cursor.execute(
            "UPDATE runs_run SET updated_at = %s WHERE id = %s", [before.replace(year=2000), run.pk]
        )
    append(writer, started("research"), move=RunMove(Run.Status.RUNNING))
    assert Run.objects.get(pk=run.pk).updated_at > before.replace(year=2000)


def test_append_moves_the_run_status_and_bumps_its_version(run, writer):
    before = Run.objects.get(pk=run.pk).version
    append(writer, started("research"), move=RunMove(Run.Status.RUNNING))
    after = Run.objects.get(pk=run.pk)
    assert after.status == Run.Status.RUNNING
    assert after.attention == Run.attention_for(Run.Status.RUNNING)
    assert after.version == before + 1


def test_an_append_rolled_back_with_its_transaction_leaves_no_gap(run, writer):
    append(writer, started("research"))
    with contextlib.suppress(RuntimeError), transaction.atomic():
        append(writer, called(1, "research"))
        raise RuntimeError("the caller's transaction fails after the append")
    event = append(writer, called(2, "research"))
    assert event.seq == 3
    assert list(Event.objects.filter(run=run).values_list("seq", flat=True)) == [1, 2, 3]
    assert verify_chain(run.pk).ok


def test_a_refused_append_leaves_the_callers_transaction_usable(run, writer):
    with transaction.atomic():
        with pytest.raises(LedgerError):
            append(writer, started("dream"))
        event = append(writer, started("research"))
    assert Event.objects.get(pk=event.pk).seq == 2


def test_what_is_not_an_event_of_the_vocabulary_is_refused_and_writes_nothing(run, writer):
    before = event_count(run)
    with pytest.raises(LedgerError, match="is not an event"):
        append(writer, "TELEPORTED")
    assert event_count(run) == before
    assert Run.objects.get(pk=run.pk).last_seq == before


def test_unknown_stage_is_refused_and_writes_nothing(run, writer):
    before = event_count(run)
    with pytest.raises(LedgerError, match="unknown stage"):
        append(writer, started("dream"))
    assert event_count(run) == before
    assert Run.objects.get(pk=run.pk).last_seq == before


def test_unknown_run_status_is_refused_and_writes_nothing(run, writer):
    before = event_count(run)
    with pytest.raises(LedgerError, match="unknown run status"):
        append(writer, started("research"), move=RunMove("sleeping"))
    assert event_count(run) == before


def test_run_fields_outside_the_movable_set_are_refused(run, writer):
    before = event_count(run)
    with pytest.raises(LedgerError, match="not set through events"):
        append(writer, started("research"), move=RunMove(pipeline="other"))
    assert event_count(run) == before
    assert Run.objects.get(pk=run.pk).pipeline == "content"


def test_a_terminal_run_status_no_longer_moves(run, writer):
    append(writer, Succeeded(), move=RunMove(Run.Status.SUCCEEDED))
    before = event_count(run)
    resumed = Resumed(mode="strict", checkpoint=None, next_stage="research", pinned_inputs={})
    with pytest.raises(LedgerError, match="no longer moves"):
        append(writer, resumed, move=RunMove(Run.Status.RESUMING))
    assert event_count(run) == before
    assert Run.objects.get(pk=run.pk).status == Run.Status.SUCCEEDED


def test_oversized_payload_is_refused_and_writes_nothing(run, writer):
    before = event_count(run)
    huge = {"blob": "x" * (settings.RESUMER_MAX_PAYLOAD_BYTES + 1)}
    with pytest.raises(LedgerError, match="exceeds the limit"):
        append(writer, result(1, result=huge))
    assert event_count(run) == before


def test_payload_above_the_inline_limit_is_stored_as_an_artifact_and_referenced(run, writer):
    big = result(
        1, result={"facts": ["f" * 100] * (settings.RESUMER_INLINE_PAYLOAD_BYTES // 100 + 1)}
    )
    event = Event.objects.get(pk=append(writer, big).pk)
    assert event.payload_ref.startswith("artifact://payload/")
    assert event.payload["stored_as"] == event.payload_ref
    assert json.loads(artifacts.read(event.payload_ref)) == big.to_payload()
    assert verify_chain(run.pk).ok


def test_a_stored_payload_keeps_what_its_timeline_row_shows_inline(run, writer):
    big = ToolResult(
        stage="research",
        call="search",
        tool="web_search",
        status="confirmed",
        reason="r" * 500,
        result=["f" * 100] * (settings.RESUMER_INLINE_PAYLOAD_BYTES // 100 + 1),
    )
    event = Event.objects.get(pk=append(writer, big).pk)
    assert event.payload["summary"] == {
        "call": "search",
        "tool": "web_search",
        "status": "confirmed",
        "reason": "r" * 200 + "…",
    }
    assert verify_chain(run.pk).ok


def test_the_inline_summary_of_a_stored_payload_is_under_the_chain(run, writer):
    big = result(1, status="confirmed", result="b" * settings.RESUMER_INLINE_PAYLOAD_BYTES)
    event = append(writer, big)
    forged = {**event.payload, "summary": {"status": "failed"}}
    column = Event._meta.get_field("payload").get_db_prep_save(forged, connection)
    with maintenance(), connection.cursor() as cursor:
        cursor.execute("UPDATE runs_event SET payload = %s WHERE id = %s", [column, event.pk])
    report = verify_chain(run.pk)
    assert report.ok is False
    assert report.first_bad_seq == event.seq


def test_payload_at_the_inline_limit_stays_inline(run, writer):
    # The payload's framing (its keys, the call and tool) plus a result string filling it.
    framing = len(canonical_json(result(1, result="").to_payload()).encode())
    full = result(1, result="y" * (settings.RESUMER_INLINE_PAYLOAD_BYTES - framing))
    payload = full.to_payload()
    assert len(canonical_json(payload).encode()) == settings.RESUMER_INLINE_PAYLOAD_BYTES
    event = append(writer, full)
    stored = Event.objects.get(pk=event.pk)
    assert (stored.payload_ref, stored.payload) == ("", payload)


def test_verify_chain_accepts_an_untouched_log(run, writer):
    for n in range(5):
        append(writer, called(n, "research"))
    report = verify_chain(run.pk)
    assert (report.ok, report.checked, report.first_bad_seq) == (True, 6, None)


def test_verify_chain_reports_the_seq_of_an_event_altered_with_raw_sql(run, writer):
    for n in range(5):
        append(writer, called(n, "research"))
    with maintenance(), connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runs_event SET stage = 'draft' WHERE run_id = %s AND seq = %s", [run.pk, 4]
        )
    report = verify_chain(run.pk)
    assert report.ok is False
    assert report.first_bad_seq == 4
    assert "seq 4 was altered" in report.problems[0]


def test_verify_chain_reports_a_deleted_event_as_a_gap(run, writer):
    for n in range(3):
        append(writer, called(n, "research"))
    with maintenance(), connection.cursor() as cursor:
        cursor.execute("DELETE FROM runs_event WHERE run_id = %s AND seq = %s", [run.pk, 2])
    report = verify_chain(run.pk)
    assert report.ok is False
    assert report.first_bad_seq == 3
    assert "a gap" in report.problems[0]


def test_verify_chain_reports_a_truncated_tail_against_the_run_head(run, writer):
    for n in range(3):
        append(writer, called(n, "research"))
    with maintenance(), connection.cursor() as cursor:
        cursor.execute("DELETE FROM runs_event WHERE run_id = %s AND seq = %s", [run.pk, 4])
    report = verify_chain(run.pk)
    assert report.ok is False
    assert "the log ends at seq 3" in report.problems[-1]


# --- anchored heads ----------------------------------------------------------------------------


def expected_anchor(run_pk: int) -> str:
    head = Run.objects.get(pk=run_pk)
    message = f"{run_pk}:{head.last_seq}:{head.head_hash}".encode()
    return hmac.new(settings.RESUMER_CHAIN_KEY.encode(), message, hashlib.sha256).hexdigest()


def rewrite_history(run: Run, seq: int, actor: str) -> None:
    """What a database writer without the key does: change event `seq`, recompute its hash and
    every later one, and move the run's head to the new end, so the chain links again."""
    prev = ""
    with maintenance(), connection.cursor() as cursor:
        for event in Event.objects.filter(run=run).order_by("seq"):
            if event.seq == seq:
                event.actor = actor
            if event.seq >= seq:
                event.prev_hash, event.hash = prev, event_hash(prev, hashed_content(event))
                cursor.execute(
                    "UPDATE runs_event SET actor = %s, prev_hash = %s, hash = %s WHERE id = %s",
                    [event.actor, event.prev_hash, event.hash, event.pk],
                )
            prev = event.hash
    Run.objects.filter(pk=run.pk).update(head_hash=prev)


def test_every_append_anchors_the_run_head_under_the_chain_key(run, writer):
    assert settings.RESUMER_CHAIN_KEY, "the tests run with a chain key"
    anchors = [Run.objects.get(pk=run.pk).head_anchor]
    assert anchors[0] == expected_anchor(run.pk)  # create_run's RUN_CREATED
    # On PostgreSQL the second append is the one-statement guarded path (the head is known).
    for n in range(2):
        append(writer, called(n, "research"))
        anchors.append(Run.objects.get(pk=run.pk).head_anchor)
        assert anchors[-1] == expected_anchor(run.pk)
    assert len(set(anchors)) == 3


def test_an_anchor_follows_the_chain_key_the_setting_names(run, writer, settings):
    # The key's HMAC state is kept per key (chain.head_anchor): a key changed is a new one.
    append(writer, called(1, "research"))
    first = Run.objects.get(pk=run.pk).head_anchor
    settings.RESUMER_CHAIN_KEY = "another-key"
    append(writer, called(2, "research"))
    assert Run.objects.get(pk=run.pk).head_anchor == expected_anchor(run.pk)
    assert first != expected_anchor(run.pk)


def test_a_history_rewritten_with_every_hash_recomputed_fails_on_its_head_anchor(run, writer):
    for n in range(4):
        append(writer, called(n, "research"))
    rewrite_history(run, 3, "mallory")
    report = verify_chain(run.pk)
    assert (report.ok, report.anchors_checked) == (False, True)
    assert report.first_bad_seq is None  # the chain itself links: only the anchor tells
    assert report.problems == [
        "run head's anchor does not match it under RESUMER_CHAIN_KEY: the head was rewritten "
        "by someone without the key (or under another key)"
    ]


def test_without_a_key_verify_chain_says_the_anchors_were_not_checked(run, writer):
    for n in range(4):
        append(writer, called(n, "research"))
    rewrite_history(run, 3, "mallory")
    with override_settings(RESUMER_CHAIN_KEY=""):
        report = verify_chain(run.pk)
    assert (report.ok, report.anchors_checked) == (True, False)
    assert report.notes == ["anchors not checked: RESUMER_CHAIN_KEY is not set"]


def test_a_head_written_without_a_key_fails_once_a_key_is_set(run, writer):
    with override_settings(RESUMER_CHAIN_KEY=""):
        append(writer, called(1, "research"))
    assert Run.objects.get(pk=run.pk).head_anchor == ""
    report = verify_chain(run.pk)
    assert report.ok is False
    assert "run head carries no anchor" in report.problems[0]


def test_a_head_anchored_under_another_key_fails(run, writer):
    with override_settings(RESUMER_CHAIN_KEY="some-other-key"):
        append(writer, called(1, "research"))
    assert verify_chain(run.pk).ok is False


# --- checkpoints ---------------------------------------------------------------------------------


def write_research_checkpoint(run, writer, **outputs):
    return write_checkpoint(
        writer,
        run,
        stage="research",
        next_stage="draft",
        manifest={"inputs": {"facts": "v3"}, "artifacts": [], "rules": [], "outputs": outputs},
        move=RunMove(Run.Status.RUNNING),
    )


def test_verified_event_records_the_sha256_of_the_checkpoint_manifest(run, writer):
    checkpoint = write_research_checkpoint(run, writer, summary="three facts")
    verified = Event.objects.get(run=run, seq=checkpoint.last_seq)
    stored = Checkpoint.objects.get(pk=checkpoint.pk).manifest
    assert verified.payload["manifest_sha256"] == (
        hashlib.sha256(canonical_json(stored).encode()).hexdigest()
    )
    assert verify_chain(run.pk).ok


def test_verify_chain_reports_a_checkpoint_whose_manifest_was_changed(run, writer):
    checkpoint = write_research_checkpoint(run, writer, summary="three facts")
    change_manifest(checkpoint, outputs={"summary": "four facts"})
    report = verify_chain(run.pk)
    assert report.ok is False
    assert report.problems == [
        f"checkpoint {checkpoint.id}: its manifest was changed: it no longer matches the hash "
        f"its VERIFIED event (seq {checkpoint.last_seq}) recorded"
    ]


def test_a_changed_manifest_is_caught_when_the_verified_payload_went_to_an_artifact(run, writer):
    rules = [{"rule": "r" * 100, "passed": True}] * (settings.RESUMER_INLINE_PAYLOAD_BYTES // 100)
    checkpoint = write_checkpoint(
        writer,
        run,
        stage="research",
        next_stage="draft",
        manifest={"artifacts": [], "rules": rules, "outputs": {"summary": "three facts"}},
        move=RunMove(Run.Status.RUNNING),
    )
    assert Event.objects.get(run=run, seq=checkpoint.last_seq).payload_ref
    assert verify_chain(run.pk).ok
    change_manifest(checkpoint, outputs={"summary": "four facts"})
    assert "its manifest was changed" in verify_chain(run.pk).problems[0]


def test_checkpoint_is_sealed_on_its_verified_event(run, writer):
    checkpoint = write_checkpoint(
        writer,
        run,
        stage="research",
        next_stage="draft",
        manifest={"inputs": {"facts": "v3"}, "artifacts": [], "rules": [], "outputs": {}},
        move=RunMove(Run.Status.RUNNING, current_stage="draft"),
    )
    verified = Event.objects.get(run=run, seq=checkpoint.last_seq)
    assert verified.type == Event.Type.VERIFIED
    assert verified.stage == checkpoint.stage == "research"
    assert checkpoint.id == f"{run.public_id}:research-verified"
    assert Run.objects.get(pk=run.pk).current_stage == "draft"


def test_checkpoint_of_a_writer_without_the_lease_writes_neither_event_nor_checkpoint(run, writer):
    leases.acquire(run.pk, "intruder", takeover=True)
    before = event_count(run)
    with pytest.raises(LeaseLost):
        write_checkpoint(
            writer,
            run,
            stage="research",
            next_stage="draft",
            manifest={"artifacts": [], "rules": [], "outputs": {}},
            move=RunMove(Run.Status.RUNNING),
        )
    assert event_count(run) == before
    assert not run.checkpoints.exists()


# A stage's end: VERIFIED, its checkpoint and the lease given up in one write, outside any
# transaction (as the engine ends a stage without artifacts), so on committed data.


@pytest.fixture
def committed_writer(transactional_db) -> Writer:
    run = new_run()
    writer = writer_for(run)
    # The engine's STARTED: from here this process knows the head, as a stage's writer does.
    append(writer, started("research"), move=RunMove(Run.Status.RUNNING))
    return writer


def _end_research(writer: Writer, run: Run | None = None) -> Checkpoint:
    return write_checkpoint(
        writer,
        run or Run.objects.get(pk=writer.run_id),
        stage="research",
        next_stage="draft",
        manifest={"inputs": {"facts": "v3"}, "artifacts": [], "rules": [], "outputs": {"n": 3}},
        move=RunMove(Run.Status.RUNNING, current_stage="draft"),
        release=True,
    )


def test_a_checkpoint_that_gives_the_lease_up_leaves_it_free_for_the_next_stage(committed_writer):
    checkpoint = _end_research(committed_writer)
    assert Event.objects.get(run_id=committed_writer.run_id, seq=checkpoint.last_seq).type == (
        Event.Type.VERIFIED
    )
    assert Checkpoint.objects.filter(pk=checkpoint.pk).exists()
    # Free without a takeover: the next stage's worker takes it with the next token.
    assert leases.acquire(committed_writer.run_id, "next") == committed_writer.token + 1


def test_the_checkpoint_a_stage_end_returns_is_the_row_a_query_returns(committed_writer):
    checkpoint = _end_research(committed_writer)
    stored = Checkpoint.objects.get(pk=checkpoint.pk)
    names = [field.attname for field in Checkpoint._meta.concrete_fields]
    assert [getattr(checkpoint, n) for n in names] == [getattr(stored, n) for n in names]
    assert not checkpoint._state.adding


@pytest.mark.postgres(reason="one statement per stage end is the PostgreSQL SQL's")
def test_a_stage_end_is_one_statement_on_postgresql(committed_writer):
    run = Run.objects.get(pk=committed_writer.run_id)
    ran: list[str] = []
    with connection.execute_wrapper(
        lambda execute, sql, *args: ran.append(sql) or execute(sql, *args)
    ):
        _end_research(committed_writer, run)
    assert len(ran) == 1
    assert leases.current(committed_writer.run_id).holder == ""


def test_a_stage_end_of_a_writer_without_the_lease_seals_and_releases_nothing(committed_writer):
    run_id = committed_writer.run_id
    intruder = leases.acquire(run_id, "intruder", takeover=True)
    before = Event.objects.filter(run_id=run_id).count()
    with pytest.raises(LeaseLost):
        _end_research(committed_writer)
    assert Event.objects.filter(run_id=run_id).count() == before
    assert not Checkpoint.objects.filter(run_id=run_id).exists()
    lease = leases.current(run_id)
    assert (lease.token, lease.holder) == (intruder, "intruder")
    assert leases.holds(run_id, intruder)


def _end_with_artifact(writer: Writer, run: Run, artifact) -> Checkpoint:
    entry = {"name": "text", "uri": artifact.uri, "sha256": artifact.sha256, "size": artifact.size}
    return write_checkpoint(
        writer,
        run,
        stage="research",
        next_stage="draft",
        manifest={"inputs": {}, "artifacts": [entry], "rules": [], "outputs": {}},
        move=RunMove(Run.Status.RUNNING, current_stage="draft"),
        release=True,
        artifacts=[artifact],
    )


def test_a_stage_ends_with_its_artifact_rows_in_the_same_write(
    committed_writer, settings, tmp_path
):
    settings.MEDIA_ROOT = tmp_path
    run = Run.objects.get(pk=committed_writer.run_id)
    artifact = artifacts.first_version("research/x/text", b"three facts", "text/plain", run=run)
    ran: list[str] = []
    with connection.execute_wrapper(
        lambda execute, sql, *args: ran.append(sql) or execute(sql, *args)
    ):
        checkpoint = _end_with_artifact(committed_writer, run, artifact)
    stored = Artifact.objects.get(name="research/x/text")
    assert (stored.version, stored.sha256, stored.run_id) == (1, artifact.sha256, run.pk)
    assert (
        Checkpoint.objects.get(pk=checkpoint.pk).artifacts[0]["uri"]
        == "artifact://research/x/text/v1"
    )
    assert artifacts.read(stored.uri) == b"three facts"
    if connection.vendor == "postgresql":
        assert len(ran) == 1  # the artifact row, VERIFIED, the checkpoint, the release
    assert leases.current(run.pk).holder == ""


def test_a_stage_end_whose_artifact_version_is_taken_writes_nothing(
    committed_writer, settings, tmp_path
):
    settings.MEDIA_ROOT = tmp_path
    run = Run.objects.get(pk=committed_writer.run_id)
    taken = artifacts.store("research/x/text", b"older", "text/plain", run=run)
    assert taken.version == 1
    before = Event.objects.filter(run=run).count()
    artifact = artifacts.first_version("research/x/text", b"three facts", "text/plain", run=run)
    with pytest.raises(IntegrityError):
        _end_with_artifact(committed_writer, run, artifact)
    assert Event.objects.filter(run=run).count() == before
    assert not Checkpoint.objects.filter(run=run).exists()
    assert list(Artifact.objects.filter(name="research/x/text").values_list("pk", flat=True)) == [
        taken.pk
    ]
    assert leases.holds(run.pk, committed_writer.token)


def test_an_effect_cannot_ride_with_a_release(committed_writer):
    with pytest.raises(LedgerError):
        append(committed_writer, called(1), effect=EffectClaim({}), release=True)


# --- the statements an append runs on the driver -----------------------------------------------


def _driver_statements(writer: Writer, *, observed: bool) -> list[str]:
    """The statements SQLite executed for one append (verb and table), seen by the driver
    itself, with or without a Django execute_wrapper observing the connection."""
    seen: list[str] = []
    raw = connection.connection
    raw.set_trace_callback(seen.append)
    watching = connection.execute_wrapper(lambda execute, *args: execute(*args))
    try:
        with watching if observed else contextlib.nullcontext():
            append(writer, called(1, "research"))
    finally:
        raw.set_trace_callback(None)
    return [" ".join(statement.split()[:3]) for statement in seen]


@pytest.mark.skipif(
    "connection.vendor != 'sqlite'", reason="the driver's-cursor rewrite is SQLite's"
)
def test_an_unobserved_append_runs_the_statements_an_observed_one_runs(transactional_db):
    # On SQLite the append path runs its statements on the driver's cursor unless someone
    # observes the connection (sql.sqlite.SQLiteAppend.execute): both ways must be the same writes.
    run = new_run()
    writer = writer_for(run)
    append(writer, started("research"))
    unobserved = _driver_statements(writer, observed=False)
    observed = _driver_statements(writer, observed=True)
    assert unobserved == observed
    assert unobserved[0] == "BEGIN IMMEDIATE" and unobserved[-1] == "COMMIT", unobserved
    assert verify_chain(run.pk).ok


def test_a_write_the_database_refuses_raises_djangos_error_and_writes_nothing(transactional_db):
    # An effect claim the database's check constraint refuses, written in autocommit (the
    # tool call's path): Django's IntegrityError, as any query would raise, and no half write.
    run = new_run()
    writer = writer_for(run)
    append(writer, started("research"))
    head = Run.objects.values_list("last_seq", "head_hash").get(pk=run.pk)
    key = "k" * 64
    claim = EffectClaim(
        {
            "delivery_key": key,
            "run_id": run.pk,
            "stage": "research",
            "call_id": "c1",
            "tool": "search",
            "policy": "SOMETIMES",  # not a ReplayPolicy: effect_policy_valid refuses it
            "target": "t",
            "request_hash": "r" * 64,
            "request": {},
            "status": "intent",
            "external_id": "",
            "result": None,
            "error": "",
            "attempts": 1,
            "cost": 0,
        }
    )
    with pytest.raises(IntegrityError):
        append(writer, called(1, idempotency_key=key), effect=claim)
    assert Run.objects.values_list("last_seq", "head_hash").get(pk=run.pk) == head
    assert not Effect.objects.filter(delivery_key=key).exists()
    assert append(writer, called(1, "research")).seq == head[0] + 1
    assert verify_chain(run.pk).ok
