"""The pipeline page (/pipelines/<name>/) and the figures behind it (runs.stats): durations,
money, interruptions and failures, what resumes saved, and where a checkpoint pays.

Runs are executed in this process (seed_demo.run_inline), so no worker or Redis is needed.
Expected figures are computed here from the event log and the effect ledger, row by row.
"""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from demo import faults
from demo.management.commands.seed_demo import run_inline
from demo.pipeline import PROMOTION_FEE
from runs import engine
from runs.access import roles
from runs.events import read
from runs.execution import sweeper
from runs.gates import answers
from runs.gates.acts import TICK
from runs.ledger import leases
from runs.ledger.append import Writer, append
from runs.models import Effect, Event, Gate, Run
from runs.pipeline import registry
from runs.reads import pipeline_stats as stats
from tests.support import events
from tests.support.plans import charge_found_and_resumed, resumed_inline

pytestmark = pytest.mark.django_db

PAGE = "/pipelines/content/"


@pytest.fixture(autouse=True)
def quick_settings(settings) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    # Stages run inside this test's transaction: no heartbeat may fire meanwhile.
    settings.RESUMER_LEASE_TTL = 120


@pytest.fixture
def viewer(db) -> Client:
    user, _ = roles.ensure_user("viewer", "viewer-demo-pass", "viewer")
    client = Client()
    client.force_login(user)
    return client


def content() -> stats.PipelineStats:
    return stats.pipeline_stats(registry.get("content"), stats.DEFAULT_WINDOW)


def by_stage(figures: stats.PipelineStats) -> dict[str, stats.StageStats]:
    return {s.stage: s for s in figures.stages}


def started() -> Run:
    return engine.start_run("content", {}, actor="test", enqueue=False)


def executed(**options) -> Run:
    run = faults.start_run("content", {}, actor="test", faults=options, enqueue=False)
    return run_inline(run.pk)


def paid_results(**filters) -> list[Event]:
    """TOOL_RESULTs that were calls: neither a reused effect nor an abandoned one."""
    return [
        e
        for e in Event.objects.filter(type=Event.Type.TOOL_RESULT, **filters)
        if not e.payload.get("reused") and not e.payload.get("skipped")
    ]


def cost(events: list[Event]) -> Decimal:
    return sum((Decimal(e.payload.get("cost", "0")) for e in events), Decimal(0))


def ms_between(start: Event, end: Event) -> int:
    return round((end.created_at - start.created_at).total_seconds() * 1000)


def synthetic_attempts(stage: str, seconds: list[int]) -> None:
    """One run whose `stage` was attempted once per entry, each VERIFIED that many seconds
    after its STARTED (rows written directly: only their timestamps matter here)."""
    run = started()
    t0 = timezone.now() - timedelta(days=1)
    rows, seq = [], run.last_seq
    for i, duration in enumerate(seconds):
        begin = t0 + timedelta(minutes=10 * i)
        for type_, at in (
            (Event.Type.STARTED, begin),
            (Event.Type.VERIFIED, begin + timedelta(seconds=duration)),
        ):
            seq += 1
            rows.append(
                Event(
                    run=run,
                    seq=seq,
                    stage=stage,
                    type=type_,
                    actor="test",
                    hash=f"{seq:064d}",
                    created_at=at,
                )
            )
    Event.objects.bulk_create(rows)


# --- The figures -----------------------------------------------------------------------------


def test_duration_runs_from_started_to_the_event_that_ended_the_attempt(facts):
    run = executed()
    figures = by_stage(content())
    for stage in registry.get("content").stage_names:
        begin = Event.objects.get(run=run, stage=stage, type=Event.Type.STARTED)
        end = Event.objects.get(run=run, stage=stage, type=Event.Type.VERIFIED)
        # One attempt: it is both the median and the p95 (to the database clock's ms).
        assert abs(figures[stage].median_ms - ms_between(begin, end)) <= 1
        assert figures[stage].p95_ms == figures[stage].median_ms
        assert (figures[stage].attempts, figures[stage].verified) == (1, 1)


def test_median_and_p95_are_nearest_rank_over_attempts(facts):
    synthetic_attempts("research", list(range(1, 21)))  # 1 s .. 20 s
    research = by_stage(content())["research"]
    assert research.timed == 20
    assert research.median_ms == 10_000  # rank ceil(0.5 × 20) = 10
    assert research.p95_ms == 19_000  # rank ceil(0.95 × 20) = 19


def test_money_spent_is_what_each_paid_tool_result_recorded(facts):
    executed()
    resumed_inline({"timeout": "visual/render-cover/after"})
    figures = content()
    for s in figures.stages:
        paid = paid_results(stage=s.stage)
        assert (s.paid_calls, s.spent) == (len(paid), cost(paid)), s.stage
    assert figures.spent == cost(paid_results())


def test_model_tokens_per_stage_are_what_each_paid_model_call_recorded(viewer, facts):
    executed()
    resumed_inline({"timeout": "research/search-1/after"})  # its first turn reused
    figures = content()
    for s in figures.stages:
        used = [read(e).usage for e in paid_results(stage=s.stage)]
        assert s.tokens == sum(u.get("prompt", 0) + u.get("completion", 0) for u in used)
    assert by_stage(figures)["research"].tokens > 0
    html = viewer.get(PAGE).content.decode()
    assert f"{by_stage(figures)['draft'].tokens:,} model tokens" in html


def test_a_strict_resume_saves_the_skipped_stages_and_the_reused_effects(facts):
    run = resumed_inline({"timeout": "visual/render-cover/after"})
    resumed = Event.objects.get(run=run, type=Event.Type.RESUMED)
    assert resumed.stage == "visual"
    figures = by_stage(content())
    # research and draft were verified before the resume, which skipped them.
    for stage in ("research", "draft"):
        before = paid_results(run=run, stage=stage, seq__lt=resumed.seq)
        assert figures[stage].skipped == 1
        # research: the loop's two model turns and its search; draft: the model call.
        assert figures[stage].skipped_calls == len(before) == {"research": 3, "draft": 1}[stage]
        assert figures[stage].skipped_money == cost(before) > 0
        used = [read(e).usage for e in before]
        tokens = sum(u.get("prompt", 0) + u.get("completion", 0) for u in used)
        assert figures[stage].skipped_tokens == tokens > 0
    for stage in ("visual", "prefill", "publish"):
        assert (figures[stage].skipped, figures[stage].skipped_calls) == (0, 0)
    # visual re-executed: the body images' confirmed effects were returned, not made again.
    reused = [
        e
        for e in Event.objects.filter(run=run, stage="visual", type=Event.Type.TOOL_RESULT)
        if e.payload.get("reused")
    ]
    assert reused and figures["visual"].reused_calls == len(reused)
    recorded = Effect.objects.filter(delivery_key__in=[e.idempotency_key for e in reused])
    assert figures["visual"].reused_money == sum(e.cost for e in recorded) > 0
    assert figures["visual"].saved_calls == len(reused)


def test_failures_and_interruptions_are_counted_per_stage(facts):
    executed(timeout="publish/promote-charge/after")  # the charge's outcome is unknown
    # A worker that vanished mid-stage, and a queued first stage that never started.
    mid = started()
    token = leases.acquire(mid.pk, "test", takeover=True)
    append(Writer(mid.pk, token, "test"), events.started("research"))
    leases.release(mid.pk, token)
    for run in (mid, started()):
        sweeper.interrupt(sweeper.Finding(run.pk, "test: worker gone", {}), takeover=True)
    figures = by_stage(content())
    assert (figures["publish"].attempts, figures["publish"].failed) == (1, 1)
    assert figures["publish"].failure_rate == 1
    research = figures["research"]
    assert (research.attempts, research.interrupted, research.lost_in_queue) == (2, 2, 1)
    assert research.interruption_rate == pytest.approx(2 / 3)
    assert research.failure_rate == 0


def test_where_a_checkpoint_pays_follows_the_thresholds(facts):
    # Declared costs alone (no run yet), then measured ones: the same verdicts.
    for figures in (content(), (executed(), content())[1]):
        verdicts = {s.stage: s.verdict for s in figures.stages}
        assert verdicts == {
            # Both ask the model (a billed, keyed call): a checkpoint keeps its answers.
            "research": stats.CheckpointVerdict.PAYS,
            "draft": stats.CheckpointVerdict.PAYS,
            "visual": stats.CheckpointVerdict.PAYS,  # uploads and renders outside
            "prefill": stats.CheckpointVerdict.OPTIONAL,  # no tool at all
            "publish": stats.CheckpointVerdict.PAYS,  # publishes and charges a card
        }
    reasons = {s.stage: " ".join(s.reasons) for s in content().stages}
    assert "changes the outside world: publish_article (RECONCILE_FIRST)" in reasons["publish"]
    assert "model (IDEMPOTENT)" in reasons["draft"]
    assert "side-effect free: calls no tool" in reasons["prefill"]


def test_a_long_stage_pays_whatever_it_costs(facts):
    synthetic_attempts("prefill", [1, 2, 30])  # p95 = 30 s
    prefill = by_stage(content())["prefill"]
    assert prefill.p95_ms >= stats.LONG_FROM_MS
    assert prefill.verdict == stats.CheckpointVerdict.PAYS
    assert prefill.reasons == ["long: p95 30.0 s ≥ 10.0 s"]


def test_only_the_last_n_runs_are_counted(facts):
    executed()
    for _ in range(10):
        started()
    pipeline = registry.get("content")
    assert by_stage(stats.pipeline_stats(pipeline, 10))["research"].attempts == 0
    assert by_stage(stats.pipeline_stats(pipeline, 25))["research"].attempts == 1
    assert stats.pipeline_stats(pipeline, 25).runs == 11


# --- The page --------------------------------------------------------------------------------


def test_pipeline_page_shows_verdicts_figures_and_svg_charts(viewer, facts):
    run = resumed_inline({"timeout": "visual/render-cover/after"})
    response = viewer.get(PAGE)
    assert response.status_code == 200
    html = response.content.decode()
    figures = content()
    assert f"${figures.spent}</strong> spent" in html
    assert "checkpoint pays" in html and "checkpoint optional" in html
    assert 'id="saved-definition"' in html
    # Three charts, each an SVG with one bar row per stage; bars have a length.
    svgs = re.findall(r'<svg class="bars".*?</svg>', html, flags=re.S)
    assert len(svgs) == 3
    for svg in svgs:
        assert svg.count('class="bar-row"') == 5
    widths = re.findall(r'class="bar bar-spent"[^>]*width="([0-9.]+)%"', html)
    assert widths and max(float(w) for w in widths) == 100.0
    # No inline style or script (CSP), the numbers are in the table too.
    assert " style=" not in html and "<style" not in html
    assert not re.search(r"<script(?![^>]*\bsrc=)", html)
    # The run page links here.
    assert f'href="{PAGE}"' in viewer.get(f"/runs/{run.public_id}/").content.decode()


def test_the_window_is_chosen_on_the_page(viewer, facts):
    html = viewer.get(PAGE).content.decode()
    assert f'<option value="{stats.DEFAULT_WINDOW}" selected>' in html
    response = viewer.get(PAGE, {"runs": "25"})
    assert response.status_code == 200
    assert response.context["stats"].window == 25
    assert '<option value="25" selected>' in response.content.decode()


@pytest.mark.parametrize("value", ["7", "abc", "-1", "", "1" * 40])
def test_a_bad_window_is_400_with_the_form_error(viewer, facts, value):
    response = viewer.get(PAGE, {"runs": value})
    assert response.status_code == 400
    html = response.content.decode()
    assert "Choose how many recent runs to look at" in html or "This field is required" in html
    assert response.context.get("stats") is None


@pytest.mark.parametrize("name", ["nope", "content2", "x" * 64])
def test_an_unknown_pipeline_is_404(viewer, name):
    assert viewer.get(f"/pipelines/{name}/").status_code == 404


def test_the_pipeline_page_needs_a_role(facts):
    assert Client().get(PAGE).status_code == 302
    nobody = User.objects.create_user("nobody", password="nobody-pass-123")
    client = Client()
    client.force_login(nobody)
    assert client.get(PAGE).status_code == 403


def test_pipeline_page_queries_do_not_grow_with_runs(viewer, facts, django_assert_max_num_queries):
    executed()
    with CaptureQueriesContext(connection) as one:
        viewer.get(PAGE)
    executed()
    resumed_inline({"timeout": "visual/render-cover/after"})
    for _ in range(5):
        started()
    with django_assert_max_num_queries(len(one.captured_queries)):
        assert viewer.get(PAGE).status_code == 200


def test_a_charge_settled_by_hand_and_reused_by_the_resume_saves_its_price(facts):

    # The charge went out and its answer never came; a supervisor found it at the card
    # processor and recorded it as made: the resume reuses it instead of charging again.
    run = charge_found_and_resumed()
    assert run.status == Run.Status.SUCCEEDED

    publish = by_stage(content())["publish"]
    assert publish.reused_calls >= 1
    assert publish.reused_money >= PROMOTION_FEE
    assert publish.replayed_after_gates == 0


def test_calls_handed_back_after_a_gate_are_not_savings(facts):

    # A reviewed run: the review and the charge's confirmation each run publish again.
    run = faults.start_run("content", {"review": "on"}, actor="test", enqueue=False)
    run = run_inline(run.pk)
    review = Gate.objects.get(run=run, gate_id="review")
    answers.answer(review.pk, review.initial, actor="ana", roles=frozenset({"operator"}))
    run = run_inline(run.pk)
    charge = Gate.objects.get(run=run, gate_id="promote-charge")
    approval = {"decision": "approve", TICK: "on"}
    answers.answer(charge.pk, approval, actor="sam", roles=frozenset({"supervisor"}))
    run = run_inline(run.pk)
    assert run.status == Run.Status.SUCCEEDED

    figures = content()
    assert figures.saved_money == 0 and figures.saved_calls == 0
    assert figures.replayed_after_gates >= 1
