"""The probe's findings M1–M3, each reproduced with raw SQL (the triggers lifted, as someone
who can write the database could), and now caught: by verify_chain, and by the planner,
which refuses to act on a row its events do not explain."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command
from django.db import connection

from demo.management.commands.seed_demo import run_inline
from runs import engine
from runs.ledger.maintenance import maintenance
from runs.ledger.verify import load_digest, make_digest, verify_chain
from runs.models import Checkpoint, Effect, Event, Run
from runs.planning.planner import compute_plan
from runs.planning.replay import Action
from tests.support.plans import charge_unknown

pytestmark = pytest.mark.django_db(transaction=True)


def raw(sql: str, params: list) -> None:
    with maintenance(), connection.cursor() as cursor:
        cursor.execute(sql, params)


def test_an_untouched_run_verifies(facts):
    run = charge_unknown()

    report = verify_chain(run.pk)

    assert report.ok, report.problems


def test_m1_a_forged_confirmation_is_reported_and_never_planned_on(facts):
    run = charge_unknown()
    charge = Effect.objects.get(run=run, call_id="promote-charge")
    raw(
        "UPDATE runs_effect SET status = %s, external_id = %s WHERE id = %s",
        ["confirmed", "ch-forged", charge.pk],
    )

    report = verify_chain(run.pk)
    plan = compute_plan(run)

    assert not report.ok
    assert any("publish/promote-charge disagrees with its events" in p for p in report.problems)
    line = next(e for e in plan.effects if e.call_id == "promote-charge")
    assert line.action == Action.BLOCKED  # not "reuse: confirmed as ch-forged"
    assert plan.blocked
    assert any("a supervisor must look" in b for b in plan.blockers)


def test_m2_a_head_written_back_after_deleting_later_events_is_reported(facts, tmp_path):
    run = engine.start_run("content", {}, actor="test", enqueue=False)
    run.refresh_from_db()
    # Stop after research: the head a forger saves.
    engine.execute(run.pk, run.current_stage, run.ticket, holder="test")
    saved = Run.objects.values("last_seq", "head_hash", "head_anchor").get(pk=run.pk)
    digest = tmp_path / "heads.json"
    run = run_inline(run.pk)
    digest.write_text(json.dumps(make_digest()))
    assert Effect.objects.filter(run=run).count() == 11

    raw("DELETE FROM runs_event WHERE run_id = %s AND seq > %s", [run.pk, saved["last_seq"]])
    raw(
        "UPDATE runs_run SET last_seq = %s, head_hash = %s, head_anchor = %s WHERE id = %s",
        [saved["last_seq"], saved["head_hash"], saved["head_anchor"], run.pk],
    )

    report = verify_chain(run.pk)
    assert not report.ok
    orphans = [p for p in report.problems if "has no event that wrote it" in p]
    # The nine effects after research (the draft's model call, a $5 charge among them) refer
    # past the head; research's two model turns are before it.
    assert len(orphans) == 9
    assert any("past the log's last event" in p for p in report.problems)
    against = verify_chain(run.pk, against=load_digest(digest))
    assert any("rolled back" in p for p in against.problems)


def test_m3_a_checkpoints_next_stage_rewritten_is_reported_and_not_built_on(facts):
    run = charge_unknown()
    research = Checkpoint.objects.get(run=run, stage="research")
    raw("UPDATE runs_checkpoint SET next_stage = %s WHERE id = %s", ["publish", research.id])

    report = verify_chain(run.pk)
    plan = compute_plan(run)

    assert any("disagrees with its VERIFIED event" in p for p in report.problems)
    assert plan.checkpoint is None and plan.next_stage == "research"
    assert any("disagrees with its VERIFIED event" in f for f in plan.fallbacks)


def test_verify_chain_against_a_digest_from_the_command_line(facts, tmp_path):
    run = charge_unknown()
    digest = tmp_path / "heads.json"
    call_command("chain_digest", "--out", str(digest))

    call_command("verify_chain", run.public_id, "--against", str(digest))

    heads = load_digest(digest)
    assert heads[run.pk] == (run.last_seq, Event.objects.get(run=run, seq=run.last_seq).hash)
