"""Bad input: unknown run ids, malformed POST bodies, forged or stale fingerprints, ledger
edits without a reason, an altered or deleted artifact file, an oversized payload, an input
version that does not exist. Each is refused with a clear error (an exception of the domain's
own type, a CommandError, an HTTP 4xx), never a 500, and nothing changes.

The runs these tests need are unfinished in a known way, not by a dying process, so their
stages run here, in the test process, through the same engine code a worker runs (only the
`timeout` fault: a `crash` fault would SIGKILL pytest)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from io import StringIO
from pathlib import Path

import pytest
from django.core.files.storage import default_storage
from django.core.management import CommandError, call_command
from django.test import Client

from demo import faults
from demo.models import RunFaults
from demo.simulators import publish_facts
from runs import engine, enqueue
from runs.access import roles
from runs.events import ToolResult
from runs.ledger import artifacts, leases
from runs.ledger.append import LedgerError, Writer, append
from runs.ledger.edits import edit_effect
from runs.models import ApprovalMode, Artifact, Checkpoint, Effect, Event, Lease, Run
from runs.pipeline import InvalidInput, UnknownPipeline
from runs.planning.planner import compute_plan
from runs.planning.resume import ResumeRefused, StalePlan, approve, load_run
from tests.faults.matrix import chain_problems
from tests.support.state import new_account

pytestmark = pytest.mark.faults

UPLOAD_TIMEOUT = {"timeout": "visual/upload-cover/after"}
CHARGE_TIMEOUT = {"timeout": "publish/promote-charge/after"}


# --- Helpers -------------------------------------------------------------------------------


def drive(run: Run) -> Run:
    """Execute the run's queued stages here until it stops."""
    for _ in range(20):
        run.refresh_from_db()
        if not (run.is_active and run.ticket):
            break
        engine.execute(
            run.pk,
            run.current_stage,
            run.ticket,
            holder="test:in-process",
            hooks=faults.FaultHooks(),
        )
    run.refresh_from_db()
    return run


def start_inline(options: dict | None = None, **inputs: str) -> Run:
    run = faults.start_run(
        "content",
        {"account": new_account("bad"), **inputs},
        actor="test:bad-input",
        faults=options or {},
        enqueue=False,
    )
    return drive(run)


def snapshot() -> dict:
    """Everything a refused request must leave as it was, Redis's queue included."""
    return {
        "runs": list(
            Run.objects.order_by("pk").values_list(
                "pk", "status", "version", "last_seq", "ticket", "current_stage"
            )
        ),
        "events": Event.objects.count(),
        "effects": list(
            Effect.objects.order_by("pk").values_list(
                "pk", "status", "external_id", "error", "attempts"
            )
        ),
        "checkpoints": Checkpoint.objects.count(),
        "artifacts": Artifact.objects.count(),
        "leases": list(Lease.objects.order_by("run_id").values_list("run_id", "token")),
        "queued": enqueue.queue().count,
        "faults": RunFaults.objects.count(),
    }


@pytest.fixture
def failed_run(transactional_db, redis_conn, facts) -> Run:
    """Research and draft verified; the cover upload timed out (outcome unknown): FAILED, and
    the plan (resume at visual, retry the upload with its key) is not blocked."""
    run = start_inline(UPLOAD_TIMEOUT)
    assert run.status == Run.Status.FAILED
    redis_conn.flushdb()  # the stages ran here; drop the jobs their commits queued
    return run


@pytest.fixture
def blocked_run(transactional_db, redis_conn, facts) -> Run:
    """The charge timed out: a NEVER effect with an unknown outcome blocks the plan."""
    run = start_inline(CHARGE_TIMEOUT)
    assert run.status == Run.Status.FAILED
    redis_conn.flushdb()
    return run


@pytest.fixture
def operator_client(transactional_db) -> Client:
    user, _ = roles.ensure_user("fault-operator", "unused-password-1", roles.OPERATOR)
    client = Client(raise_request_exception=False)
    client.force_login(user)
    return client


@pytest.fixture
def supervisor_client(transactional_db) -> Client:
    user, _ = roles.ensure_user("fault-supervisor", "unused-password-2", roles.SUPERVISOR)
    client = Client(raise_request_exception=False)
    client.force_login(user)
    return client


# --- Unknown run ids -----------------------------------------------------------------------

UNKNOWN_IDS = ["run-999999", "run-abc", "999", "", "run-", "run--1", "run-1 OR 1=1"]
UNKNOWN_IDS += ["run-" + "9" * 30]


@pytest.mark.parametrize("public_id", UNKNOWN_IDS)
def test_an_unknown_run_id_is_refused_by_the_resume_api(public_id, failed_run):
    before = snapshot()
    with pytest.raises(ResumeRefused, match="unknown run"):
        load_run(public_id)
    assert snapshot() == before


@pytest.mark.parametrize("public_id", ["run-999999", "run-abc", "run-" + "9" * 30])
def test_an_unknown_run_id_is_a_command_error(public_id, failed_run):
    before = snapshot()
    with pytest.raises(CommandError, match="unknown run"):
        call_command("plan", public_id, stdout=StringIO())
    with pytest.raises(CommandError, match="unknown run"):
        call_command("resume", public_id, "--strict", "--fingerprint", "0" * 64, stdout=StringIO())
    assert snapshot() == before


@pytest.mark.parametrize(
    "path",
    [
        "/runs/run-999999/",
        "/runs/run-999999/plan/",
        "/runs/run-999999/timeline/",
        "/runs/run-abc/",
        "/runs/run-" + "9" * 30 + "/",
        "/runs/artifacts/999999/",
        "/runs/artifacts/999999/raw/",
    ],
)
def test_an_unknown_run_or_artifact_in_the_dashboard_is_a_404(path, operator_client, failed_run):
    before = snapshot()
    assert operator_client.get(path).status_code == 404
    assert snapshot() == before


def test_approving_an_unknown_run_in_the_dashboard_is_a_404(operator_client, failed_run):
    before = snapshot()
    fingerprint = compute_plan(failed_run).fingerprint
    response = operator_client.post(
        "/runs/run-999999/approve/",
        {"action": ApprovalMode.STRICT, "fingerprint": fingerprint, "confirm": "on"},
    )
    assert response.status_code == 404
    assert snapshot() == before


# --- Malformed POST bodies -----------------------------------------------------------------

FP = "<fingerprint>"  # replaced by the run's real fingerprint


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"action": ApprovalMode.STRICT},
        {"fingerprint": FP, "confirm": "on"},
        {"action": "bogus", "fingerprint": FP, "confirm": "on"},
        {"action": ApprovalMode.STRICT, "fingerprint": FP},  # not confirmed
        {"action": ApprovalMode.STRICT, "fingerprint": FP, "confirm": "off"},
        {"action": ApprovalMode.STRICT, "fingerprint": "not-hex", "confirm": "on"},
        {"action": ApprovalMode.STRICT, "fingerprint": FP + "00", "confirm": "on"},
        {"action": ApprovalMode.STRICT, "fingerprint": FP.upper(), "confirm": "on"},
        {"action": "strict\x00", "fingerprint": FP, "confirm": "on"},
    ],
    ids=[
        "empty",
        "no-fingerprint",
        "no-action",
        "unknown-action",
        "not-confirmed",
        "confirmed-off",
        "fingerprint-not-hex",
        "fingerprint-too-long",
        "fingerprint-uppercase",
        "nul-byte",
    ],
)
def test_a_malformed_approval_form_is_a_400_and_changes_nothing(body, operator_client, failed_run):
    fingerprint = compute_plan(failed_run).fingerprint

    def fill(value: str) -> str:
        return value.replace(FP, fingerprint).replace(FP.upper(), fingerprint.upper())

    before = snapshot()
    response = operator_client.post(
        f"/runs/{failed_run.public_id}/approve/", {k: fill(v) for k, v in body.items()}
    )
    assert response.status_code == 400
    assert snapshot() == before


@pytest.mark.parametrize(
    "content_type,payload",
    [
        ("application/json", b'{"action": "strict", "fingerprint": '),
        ("application/json", b'{"action": "strict"}'),
        ("application/x-www-form-urlencoded", b"\xff\xfe\x00garbage=%%%&&&=="),
        ("multipart/form-data; boundary=xyz", b"--xyz\r\nnot a part\r\n--xyz--"),
        ("multipart/form-data", b"no boundary at all"),
        ("text/plain", b"action=strict"),
    ],
    ids=["truncated-json", "json", "binary-urlencoded", "bad-multipart", "no-boundary", "text"],
)
def test_a_malformed_approval_body_is_a_4xx_and_changes_nothing(
    content_type, payload, operator_client, failed_run
):
    before = snapshot()
    response = operator_client.post(
        f"/runs/{failed_run.public_id}/approve/", payload, content_type=content_type
    )
    assert 400 <= response.status_code < 500
    assert snapshot() == before


def test_an_oversized_approval_body_is_a_4xx_and_changes_nothing(operator_client, failed_run):
    before = snapshot()
    fingerprint = compute_plan(failed_run).fingerprint
    response = operator_client.post(
        f"/runs/{failed_run.public_id}/approve/",
        {
            "action": ApprovalMode.STRICT,
            "fingerprint": fingerprint,
            "confirm": "on",
            "pad": "x" * 3_000_000,
        },
    )
    assert 400 <= response.status_code < 500
    assert snapshot() == before


# --- Forged or stale fingerprints ----------------------------------------------------------


@pytest.mark.parametrize(
    "fingerprint",
    ["", "0" * 64, "f" * 64, "not a fingerprint"],
    ids=["empty", "zeros", "fs", "text"],
)
def test_a_forged_fingerprint_is_refused_and_changes_nothing(fingerprint, failed_run):
    before = snapshot()
    with pytest.raises(StalePlan) as refused:
        approve(failed_run, ApprovalMode.STRICT, fingerprint, actor="user:operator")
    assert refused.value.plan.fingerprint == compute_plan(failed_run).fingerprint
    assert snapshot() == before


def test_another_runs_fingerprint_is_refused_and_changes_nothing(failed_run):
    other = start_inline(UPLOAD_TIMEOUT)
    before = snapshot()
    with pytest.raises(StalePlan):
        approve(
            failed_run, ApprovalMode.STRICT, compute_plan(other).fingerprint, actor="user:operator"
        )
    assert snapshot() == before


def test_a_fingerprint_gone_stale_by_a_ledger_edit_is_refused(failed_run):
    stale = compute_plan(failed_run).fingerprint
    upload = Effect.objects.get(run=failed_run, call_id="upload-cover")
    edit_effect(
        upload.pk,
        {"status": Effect.Status.FAILED},
        reason="the asset store shows no upload",
        actor="user:supervisor",
    )
    before = snapshot()
    with pytest.raises(StalePlan):
        approve(failed_run, ApprovalMode.STRICT, stale, actor="user:operator")
    assert snapshot() == before


def test_a_fingerprint_gone_stale_by_new_input_versions_is_refused(failed_run):
    stale = compute_plan(failed_run).fingerprint
    publish_facts(failed_run.inputs["topic"])  # facts v4 appears: the plan now offers drift
    before = snapshot()
    for action in (ApprovalMode.STRICT, ApprovalMode.UPGRADE):
        with pytest.raises(StalePlan):
            approve(failed_run, action, stale, actor="user:operator")
    assert snapshot() == before


def test_a_stale_fingerprint_in_the_dashboard_is_a_409_and_changes_nothing(
    operator_client, failed_run
):
    stale = compute_plan(failed_run).fingerprint
    publish_facts(failed_run.inputs["topic"])
    before = snapshot()
    response = operator_client.post(
        f"/runs/{failed_run.public_id}/approve/",
        {"action": ApprovalMode.STRICT, "fingerprint": stale, "confirm": "on"},
    )
    assert response.status_code == 409
    assert snapshot() == before


def test_an_upgrade_without_new_inputs_is_refused(failed_run):
    before = snapshot()
    with pytest.raises(ResumeRefused, match="no upgrade"):
        approve(
            failed_run,
            ApprovalMode.UPGRADE,
            compute_plan(failed_run).fingerprint,
            actor="user:operator",
        )
    assert snapshot() == before


def test_approving_a_blocked_plan_is_refused(blocked_run):
    plan = compute_plan(blocked_run)
    assert plan.blockers
    before = snapshot()
    with pytest.raises(ResumeRefused, match="blocked"):
        approve(blocked_run, ApprovalMode.STRICT, plan.fingerprint, actor="user:operator")
    assert snapshot() == before


@pytest.mark.parametrize("action", ["", "STRICT", "resume", "strict "])
def test_an_unknown_action_is_refused(action, failed_run):
    before = snapshot()
    with pytest.raises(ResumeRefused, match="unknown action"):
        approve(failed_run, action, compute_plan(failed_run).fingerprint, actor="user:operator")
    assert snapshot() == before


# --- Ledger edits without a reason (and other bad edits) -----------------------------------


@pytest.mark.parametrize(
    "changes,reason,message",
    [
        ({"status": "failed"}, "", "needs a reason"),
        ({"status": "failed"}, "   \n\t", "needs a reason"),
        ({"status": "confirmed"}, "processor says so", "external id"),
        ({"status": "charged"}, "processor says so", "unknown effect status"),
        ({"attempts": 0}, "reset", "cannot be edited"),
        ({"status": "unknown"}, "no change", "nothing changed"),
    ],
    ids=["no-reason", "blank-reason", "confirmed-without-id", "bad-status", "field", "no-op"],
)
def test_a_bad_ledger_edit_is_refused_and_changes_nothing(changes, reason, message, blocked_run):
    charge = Effect.objects.get(run=blocked_run, call_id="promote-charge")
    assert charge.status == Effect.Status.UNKNOWN
    before = snapshot()
    with pytest.raises(LedgerError, match=message):
        edit_effect(charge.pk, changes, reason=reason, actor="user:supervisor")
    assert snapshot() == before


def test_a_ledger_edit_of_an_unknown_effect_is_refused(blocked_run):
    before = snapshot()
    with pytest.raises(LedgerError, match="does not exist"):
        edit_effect(999999, {"status": "failed"}, reason="x", actor="user:supervisor")
    assert snapshot() == before


@pytest.mark.parametrize("reason", ["", "   "], ids=["empty", "blank"])
def test_an_admin_ledger_edit_without_a_reason_is_a_form_error(
    reason, supervisor_client, blocked_run
):
    charge = Effect.objects.get(run=blocked_run, call_id="promote-charge")
    before = snapshot()
    response = supervisor_client.post(
        f"/admin/runs/effect/{charge.pk}/change/",
        {"status": "failed", "external_id": "", "error": "", "reason": reason},
    )
    assert response.status_code == 200  # the form again, with its error
    assert response.context["adminform"].form.errors
    assert snapshot() == before


# --- An altered or deleted artifact file ---------------------------------------------------


@pytest.fixture
def draft_blob(failed_run) -> Iterator[Path]:
    """The draft checkpoint's blob on disk; put back as it was afterwards (blobs are content
    addressed and shared by every run with the same content)."""
    entry = Checkpoint.objects.get(run=failed_run, stage="draft").artifacts[0]
    path = Path(default_storage.path(artifacts.get(entry["uri"]).blob))
    original = path.read_bytes()
    yield path
    path.write_bytes(original)


@pytest.mark.parametrize("damage", ["altered", "deleted"])
def test_a_damaged_artifact_makes_the_plan_fall_back_and_changes_nothing(
    damage, draft_blob, failed_run
):
    if damage == "altered":
        draft_blob.write_bytes(draft_blob.read_bytes() + b"\nAn edit nobody verified.\n")
    else:
        draft_blob.unlink()
    before = snapshot()
    plan = compute_plan(failed_run)
    assert plan.next_stage == "draft"
    assert plan.checkpoint == Checkpoint.objects.get(run=failed_run, stage="research").id
    said = {"altered": "was altered", "deleted": "is gone"}[damage]
    assert len(plan.fallbacks) == 1 and said in plan.fallbacks[0]
    assert [line.ok for line in plan.artifacts if line.stage == "draft"] == [False]
    assert snapshot() == before


@pytest.mark.parametrize("damage", ["altered", "deleted"])
def test_a_run_resumed_past_a_damaged_artifact_rebuilds_it(damage, draft_blob, failed_run):
    if damage == "altered":
        draft_blob.write_bytes(b"not the draft")
    else:
        draft_blob.unlink()
    approve(
        failed_run, ApprovalMode.STRICT, compute_plan(failed_run).fingerprint, actor="user:operator"
    )
    run = drive(failed_run)
    assert run.status == Run.Status.SUCCEEDED
    final = Checkpoint.objects.filter(run=run, stage="draft").order_by("-last_seq").first()
    entry = final.artifacts[0]
    assert artifacts.verify(entry["uri"], entry["sha256"]).ok
    assert chain_problems(run.pk) == []


def test_a_deleted_artifact_in_the_dashboard_is_a_404(operator_client, draft_blob, failed_run):
    entry = Checkpoint.objects.get(run=failed_run, stage="draft").artifacts[0]
    draft_blob.unlink()
    before = snapshot()
    response = operator_client.get(f"/runs/artifacts/{artifacts.get(entry['uri']).pk}/raw/")
    assert response.status_code == 404
    assert snapshot() == before


# --- An oversized payload ------------------------------------------------------------------


def test_an_oversized_event_payload_is_refused_and_writes_nothing(failed_run, settings):
    token = leases.acquire(failed_run.pk, "test:writer")
    writer = Writer(failed_run.pk, token, "test:writer")
    before = snapshot()
    huge = {"blob": "x" * (settings.RESUMER_MAX_PAYLOAD_BYTES + 1)}
    with pytest.raises(LedgerError, match="exceeds the limit"):
        append(writer, ToolResult(stage="visual", call="c", tool="t", result=huge))
    assert snapshot() == before
    leases.release(failed_run.pk, token)


def test_a_tool_result_too_large_to_record_fails_the_stage_cleanly(
    transactional_db, redis_conn, facts, settings
):
    # The search source returns facts far bigger than the ledger takes in one event.
    settings.RESUMER_MAX_PAYLOAD_BYTES = 64 * 1024
    claim = {"claim": "y" * 1000, "source": "https://example.org/big"}
    sheet = publish_facts("resumable-agents", [claim] * 100)
    run = start_inline(facts=f"v{sheet.version}")

    assert run.status == Run.Status.FAILED
    failed = Event.objects.filter(run=run, type=Event.Type.FAILED).get()
    assert "exceeds the limit" in failed.payload["error"]
    assert not Checkpoint.objects.filter(run=run).exists()
    assert chain_problems(run.pk) == []


# --- Input versions that do not exist ------------------------------------------------------


@pytest.mark.parametrize(
    "inputs",
    [
        {"facts": "v99"},
        {"facts": "v0"},
        {"facts": "3"},
        {"facts": "v"},
        {"facts": "v-1"},
        {"facts": "v03"},  # not how the source names v3: it would pin a phantom version
        {"facts": "v\u0663"},  # ARABIC-INDIC DIGIT THREE
        {"facts": "v\u00b2"},  # SUPERSCRIPT TWO
        {"facts": "v3 "},
        {"topic": "t" * 65},
        {"topic": "no-such-topic"},
        {"colour": "blue"},
    ],
    ids=lambda inputs: json.dumps(inputs, ensure_ascii=True),
)
def test_an_input_version_that_does_not_exist_is_refused(inputs, transactional_db, facts):
    before = snapshot()
    with pytest.raises(InvalidInput):
        engine.start_run("content", inputs, actor="test:bad-input")
    assert snapshot() == before


@pytest.mark.parametrize(
    "options",
    [
        {"crash": "dream/search/before"},
        {"crash": "visual/nope/before"},
        {"crash": "visual/render-cover/during"},
        {"crash": "nowhere"},
        {"timeout": "publish"},
        {"timeout": "publish/publish/before"},
        {"delay": "soon"},
        {"delay": -1},
        {"stall": {"visual/render-cover": "soon"}},
        {"stall": {"visual/render-cover": -5}},
        {"stall": "visual/render-cover"},
        {"stall": {"visual": 1}},
        {"stall": {"visual/no-such-call": 3}},
        {"network": {"publish/publish": "explode"}},
        {"network": {"research/search-1": "drop"}},
        {"network": {"publish/nope": "drop"}},
        {"network": "publish/publish"},
        {"retries": 3},
    ],
    ids=lambda options: json.dumps(options),
)
def test_bad_fault_specs_are_refused(options, transactional_db, facts):
    before = snapshot()
    with pytest.raises(InvalidInput):
        faults.start_run("content", {}, actor="test:bad-input", faults=options)
    assert snapshot() == before


def test_an_unknown_pipeline_is_refused(transactional_db, facts):
    before = snapshot()
    with pytest.raises(UnknownPipeline):
        engine.start_run("no-such-pipeline", {}, actor="test:bad-input")
    assert snapshot() == before


@pytest.mark.parametrize(
    ("command", "argv"),
    [
        ("start_run", ["content", "--input", "facts=v99"]),
        ("start_run", ["content", "--input", "facts=v\u00b2"]),
        ("start_run", ["content", "--input", "facts"]),
        ("start_run", ["content", "--input", "facts="]),
        ("start_run_with_faults", ["content", "--crash-at", "visual/nope/before"]),
        ("start_run_with_faults", ["content", "--network", "publish/publish"]),
        ("start_run_with_faults", ["content", "--input", "facts=v99", "--delay", "1"]),
        ("start_run", ["nope"]),
    ],
    ids=[
        "missing-version",
        "superscript",
        "no-value",
        "blank-value",
        "bad-crash-point",
        "network-without-mode",
        "bad-input-with-faults",
        "unknown-pipeline",
    ],
)
def test_the_start_run_commands_refuse_bad_input_with_a_command_error(
    command, argv, transactional_db, facts
):
    before = snapshot()
    with pytest.raises(CommandError):
        call_command(command, *argv, "--no-enqueue", stdout=StringIO())
    assert snapshot() == before
