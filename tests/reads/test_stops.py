"""Why a run stopped, in one sentence: runs/stops.py on the payloads the engine, the sweeper
and the contract write (the inbox tests check the same sentences on real runs)."""

from __future__ import annotations

import pytest

from runs.models import EventType, ReplayPolicy
from runs.planning.replay import Action
from runs.reads.stops import MAX_CHARS, RESOLVED, sentence

LEASE_RAN_OUT = {
    "reason": "the worker stopped renewing its lease",
    "holder": "worker:host:123",
    "token": "4",
    "last_heartbeat": "2026-01-01 00:00:00",
    "lease_expired_at": "2026-01-01 00:00:04",
    "last_seq": 17,
}
UNKNOWN_PUBLISH = {
    "call": "publish",
    "tool": "publish_article",
    "status": "unknown",
    "error": "outcome unknown: OutcomeUnknown: publish did not answer in time",
    "timed_out": True,
}


def test_a_worker_lost_during_a_call_names_the_call_and_the_plans_action():
    payload = {**LEASE_RAN_OUT, "call": "upload-cover", "tool": "upload_asset"}
    text = sentence(
        EventType.INTERRUPTED,
        "visual",
        payload,
        policy=ReplayPolicy.IDEMPOTENT,
        planned=Action.RETRY_SAME_KEY,
    )
    assert text == "worker lost during upload-cover; the resume retries it with the same key"


def test_a_worker_lost_between_calls_names_the_stage():
    assert sentence(EventType.INTERRUPTED, "draft", LEASE_RAN_OUT) == (
        "worker lost during the draft stage"
    )


def test_a_queued_job_redis_lost_says_so():
    payload = {"reason": "the queued stage job is gone from Redis", "job_state": "missing"}
    assert sentence(EventType.INTERRUPTED, "research", payload) == (
        "the queued research job was lost from Redis"
    )


def test_a_queued_job_rq_gave_up_on_says_what_rq_reports():
    payload = {"reason": "RQ reports the stage job as failed", "job_state": "failed"}
    assert sentence(EventType.INTERRUPTED, "research", payload) == (
        "the queued research job never started (RQ: failed)"
    )


def test_an_interruption_with_only_a_reason_gives_the_reason():
    assert sentence(EventType.INTERRUPTED, "research", {"reason": "test: gone. More."}) == (
        "interrupted: test: gone"
    )


def test_a_publish_that_timed_out_and_is_live_says_the_resume_records_it():
    text = sentence(
        EventType.FAILED,
        "publish",
        UNKNOWN_PUBLISH,
        policy=ReplayPolicy.RECONCILE_FIRST,
        verb="publish",
        planned=Action.RECORD_FOUND,
    )
    assert text == "publish timed out; the target has it: the resume records it, no second publish"


def test_a_publish_that_timed_out_before_its_plan_says_the_plan_asks_the_target():
    text = sentence(
        EventType.FAILED, "publish", UNKNOWN_PUBLISH, policy=ReplayPolicy.RECONCILE_FIRST
    )
    assert text == "publish timed out; the plan asks the target whether it happened"


def test_a_charge_with_an_unknown_outcome_needs_a_supervisor():
    payload = {
        "call": "promote-charge",
        "tool": "charge_card",
        "status": "unknown",
        "error": "outcome unknown: ConnectionResetError: peer went away",
        "timed_out": False,
    }
    text = sentence(EventType.FAILED, "publish", payload, policy=ReplayPolicy.NEVER)
    assert text == "promote-charge outcome unknown: a supervisor must decide"


def test_a_timed_out_call_says_so_from_its_field_whatever_its_error_says():
    payload = {**UNKNOWN_PUBLISH, "error": "outcome unknown: OutcomeUnknown: gone"}
    text = sentence(EventType.FAILED, "publish", payload, policy=ReplayPolicy.RECONCILE_FIRST)
    assert text == "publish timed out; the plan asks the target whether it happened"


def test_a_call_failed_before_timed_out_was_recorded_says_its_outcome_is_unknown():
    # Written before FAILED carried `timed_out`: the error's words are not read for it.
    payload = {key: value for key, value in UNKNOWN_PUBLISH.items() if key != "timed_out"}
    text = sentence(EventType.FAILED, "publish", payload, policy=ReplayPolicy.RECONCILE_FIRST)
    assert text == "publish outcome unknown; the plan asks the target whether it happened"


def test_an_unknown_outcome_a_supervisor_resolved_since_says_the_ledger_has_it():
    payload = {**UNKNOWN_PUBLISH, "call": "promote-charge", "tool": "charge_card"}
    text = sentence(
        EventType.FAILED, "publish", payload, policy=ReplayPolicy.NEVER, planned=RESOLVED
    )
    assert text == "promote-charge timed out; its outcome is in the ledger now"


def test_a_failed_verification_names_the_failed_rules_from_their_field():
    payload = {"failed_rules": ["image.count == 3", "image.alt != ''"]}
    assert sentence(EventType.FAILED, "visual", payload) == (
        "visual output failed its checks: image.count == 3, image.alt != ''"
    )


def test_a_failed_verification_names_the_rules_that_failed():
    # As written before FAILED carried `failed_rules`: read from each rule's `passed`.
    payload = {
        "error": "verification failed",
        "rules": [
            {"name": "image.count == 3", "passed": False, "detail": ""},
            {"name": "image.watermark == false", "passed": True, "detail": ""},
        ],
    }
    assert sentence(EventType.FAILED, "visual", payload) == (
        "visual output failed its checks: image.count == 3"
    )


def test_a_stage_that_raised_gives_its_error():
    payload = {"error": "ValueError: the facts sheet is empty"}
    assert sentence(EventType.FAILED, "research", payload) == (
        "research failed: ValueError: the facts sheet is empty"
    )


def test_a_stop_for_a_decision_gives_the_first_sentence_of_its_reason():
    payload = {
        "error": "charge_card (promote-charge) is NEVER: its outcome is intent and it is never "
        "re-run automatically. A supervisor must resolve it in the ledger (admin)."
    }
    assert sentence(EventType.NEEDS_APPROVAL, "publish", payload) == (
        "stopped for a decision: charge_card (promote-charge) is NEVER: its outcome is intent "
        "and it is never re-run automatically"
    )


def test_a_deviation_gives_the_difference():
    payload = {
        "reason": "render_image (visual/render-body-1): the plan said reuse, the engine found call"
    }
    assert sentence(EventType.PLAN_DEVIATED, "visual", payload) == (
        "deviated from its approved plan: render_image (visual/render-body-1): the plan said "
        "reuse, the engine found call"
    )


def test_a_payload_stored_as_an_artifact_is_read_from_its_summary():
    payload = {"stored_as": "artifact://payload/run-1/9/v1", "bytes": 90000, "summary": {
        "call": "upload-cover", "tool": "upload_asset", "reason": "the worker stopped renewing"
    }}  # fmt: skip
    assert sentence(EventType.INTERRUPTED, "visual", payload, policy=ReplayPolicy.SAFE) == (
        "worker lost during upload-cover; pure computation: the resume runs it again"
    )


@pytest.mark.parametrize("payload", [None, {}, {"error": 42}, {"rules": "not a list"}])
def test_odd_payloads_still_give_a_sentence(payload):
    assert sentence(EventType.FAILED, "draft", payload).startswith("draft failed")


def test_a_long_error_is_cut():
    text = sentence(EventType.FAILED, "draft", {"error": "x" * 5000})
    assert len(text) == MAX_CHARS
    assert text.endswith("…")
