"""The crash matrix's case runner, shared by pytest (tests/faults) and the
script tests/faults/run_matrix.py.

A case is one tool call of one stage of the demo pipeline and a moment: `before` the call is
made (its intent is recorded, the outside world has not seen it) or `after` (the outside
world has seen it, the ledger has not recorded its result). `run_case()` drives it the way
production would go through it, with real Redis and real `rqworker` processes:

    start the run with the crash point → the worker dies by SIGKILL → a healthy worker's
    sweeper finds the run interrupted → compute the plan → (a NEVER effect with an unknown
    outcome blocks: a supervisor looks the charge up at the card processor and resolves the
    ledger) → strict resume → run to the end → check every invariant against the database.

Nothing here needs pytest: the caller provides Django (configured, migrated, demo facts
seeded), the demo service at settings.DEMO_SERVICE_URL (the outside world: renderer, asset
store, platform, card processor) and a pool of Workers that knows the database, Redis and
service the workers must use.

Gate cases (`gate:` ids) run the demo with review=on, so publish asks an operator's review
and a supervisor's confirmation of the charge: the worker dies before a gate opens
(`before-ask`), when the stage runs again and finds the answer (`after-answer`), or between
the charge's confirmation and the confirmed call (`before`, its intent recorded). The
matrix's operator answers each gate as it comes (a supervisor the charge), before the crash
and during the resume, and every invariant holds, plus: no gate asked twice, each answered
once. Edited cases (`+edit:` ids) have the supervisor change the charge's amount (EDITS)
before the crash between the answer and the call: the card is charged once, the edited
amount, and the ledger, the plan and its verdict say that amount.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from django.db.models import Max

from tests.support.processes import Workers, wait_for
from tests.support.state import new_account, run_status, wait_lease_free, wait_settled

if TYPE_CHECKING:
    from tests.faults.network import NetworkCase

PIPELINE = "content"
FULL_MATRIX_ENV = "RESUMER_FULL_MATRIX"

# What plain `make test` runs: one SAFE call, one idempotent upload, the RECONCILE_FIRST
# publish after the article went live, and the NEVER charge after the card was charged.
REPRESENTATIVE = (
    # Inside research's agent loop: after the model asked for the search tool (its turn
    # recorded), before the tool ran.
    "research/search-1/before",
    "visual/upload-cover/before",
    "publish/publish/after",
    "publish/promote-charge/after",
    # A gate: the worker dies right after the review's answer; it is not asked again.
    "gate:publish/review/after-answer",
    # An edited confirmation: the worker dies between the charge's edited answer and the call.
    "gate:publish/promote-charge/after-answer+edit:amount=20.00",
)
# What the matrix's supervisor changes in a confirmation, per tool, in the edited cases.
EDITS = {"charge_card": (("amount", "20.00"),)}

# Invariant ids, in report order, with what each one means.
INVARIANTS: dict[str, str] = {
    "crashed": "the worker died by SIGKILL at the crash point",
    "interrupted": "the sweeper marked the run interrupted",
    "resumes-at-crash": "the plan skips every stage before the crashed one",
    "succeeded": "the strict resume ran the run to success",
    "one-article": "one article on the platform",
    "one-upload-per-asset": "one billed upload per asset",
    "renders-billed-once": "each image rendered and billed once",
    "charge-at-most-once": "the card charged at most once",
    "ledger-settled": "every effect confirmed with its external id",
    "outputs-match-world": "publish outputs name the live article and the charge",
    "artifacts-equal": "final artifacts equal a run without a crash",
    "seq-gap-free": "event seq gap-free, hash chain intact",
    "checkpoints-verified": "every checkpoint seals its VERIFIED event",
    "plan-kept": "the resume made exactly the calls, target requests, tokens and money its plan "
    "priced",
    "gate-asked-once": "no gate asked twice: one GATE_OPENED per stage and gate, unless it expired",
    "gate-answered-once": "each gate answered once: one final HUMAN_ANSWERED per gate asked",
    "edit-kept": "an edited call made once, with the edited arguments: what the target holds, "
    "the ledger's row was sent and priced at, and its answer's diff",
    "no-call-remade": "no call re-made on a re-entry: a call id whose result a stage recorded "
    "is never called again in the run (replayed or reused)",
    "plan-gates-kept": "plan = reality, with gates: the gates the resumed work opened are the "
    "plan's 'ask' lines, none it said were answered",
}
# Who answers gates in the matrix, by the role a gate names.
GATE_PEOPLE = {"operator": "user:operator", "supervisor": "user:supervisor"}

# Which tool each meter row of the outside world stands for: the demo service's operations
# (its calls and its reconcile lookups) and the in-process systems' SimCall rows. The world's
# own meters are held against the plan's prediction per tool, independently of what the
# engine says it did.
METERED_TOOLS = {
    "render": "render_image",
    "render.lookup": "render_image",
    "upload": "upload_asset",
    "upload.lookup": "upload_asset",
    "publish": "publish_article",
    "publish.lookup": "publish_article",
    "charge": "charge_card",
    "charge.lookup": "charge_card",
    # The language model (demo_service/chat.py): the research loop's turns and the draft
    "chat": "model",
    # SimCall systems
    "search": "search",
    "llm": "generate_draft",
}


def full_matrix() -> bool:
    return os.environ.get(FULL_MATRIX_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


@dataclass(frozen=True)
class Case:
    stage: str
    call: str
    when: str
    # A run with review=on: its gates are asked and answered on the way.
    reviewed: bool = False
    # What the supervisor changes when they confirm the call: (argument, value) pairs.
    edits: tuple[tuple[str, str], ...] = ()

    @property
    def point(self) -> str:
        """The crash point demo/faults.py takes."""
        return f"{self.stage}/{self.call}/{self.when}"

    @property
    def id(self) -> str:
        edited = "".join(f"+edit:{name}={value}" for name, value in self.edits)
        return f"gate:{self.point}{edited}" if self.reviewed else self.point

    def __str__(self) -> str:
        return self.id


def all_cases() -> list[Case]:
    """Every expected call of every stage, before and after, then every gate: read from the
    pipeline itself, so a call or a gate added to the demo is in the matrix without touching
    this file."""
    from demo.faults import WHEN
    from runs.pipeline import registry

    pipeline = registry.get(PIPELINE)
    calls = [
        Case(stage.name, call.call_id, when)
        for stage in pipeline.stages
        for call in stage.calls
        for when in WHEN
    ]
    return calls + gate_cases()


def gate_cases() -> list[Case]:
    """On a reviewed run, around every gate the demo declares (a stage's `asks`, a confirmed
    tool's call): before it opens, after its answer; and for a confirmation, between its
    answer and the call (the call's `before`: its intent is recorded, the call not made), as
    asked and, for a tool with EDITS, edited."""
    from demo.faults import GATE_WHEN
    from runs.pipeline import registry

    pipeline = registry.get(PIPELINE)
    cases = []
    for stage in pipeline.stages:
        confirmed = [
            c.call_id for c in stage.calls if pipeline.tool(c.tool).confirmation is not None
        ]
        for gate in [*stage.asks, *confirmed]:
            cases += [Case(stage.name, gate, when, reviewed=True) for when in GATE_WHEN]
        cases += [Case(stage.name, call, "before", reviewed=True) for call in confirmed]
        tools = {c.call_id: c.tool for c in stage.calls}
        cases += [
            Case(stage.name, call, when, reviewed=True, edits=EDITS[tools[call]])
            for call in confirmed
            if tools[call] in EDITS
            for when in ("after-answer", "before")
        ]
    return cases


@dataclass
class Check:
    passed: bool
    detail: str = ""


@dataclass
class CaseResult:
    case: Case | NetworkCase
    checks: dict[str, Check] = field(default_factory=dict)
    error: str = ""
    supervisor: str = ""
    run_id: str = ""
    seconds: float = 0.0
    logs: list[str] = field(default_factory=list)
    # What this kind of case checks (the crash matrix's, or the network faults').
    invariants: dict[str, str] = field(default_factory=lambda: INVARIANTS)

    @property
    def passed(self) -> bool:
        return not self.error and all(c.passed for c in self.checks.values())

    def check(self, name: str, passed: bool, detail: str = "") -> None:
        assert name in self.invariants, name
        self.checks[name] = Check(bool(passed), detail)

    def describe(self) -> str:
        lines = [f"{self.case} ({self.run_id or 'no run'}): {'PASS' if self.passed else 'FAIL'}"]
        if self.error:
            lines.append(f"  error: {self.error}")
        if self.supervisor:
            lines.append(f"  supervisor: {self.supervisor}")
        for name, check in self.checks.items():
            if not check.passed:
                lines.append(f"  {name}: {check.detail or self.invariants[name]}")
        if not self.passed and self.logs:
            lines.append(f"  worker logs: {', '.join(self.logs)}")
        return "\n".join(lines)


# --- The outside world's meters ------------------------------------------------------------


def service():
    """The demo service the workers use, as its control API reads it."""
    from django.conf import settings

    from demo_service.process import ServiceClient

    return ServiceClient(settings.DEMO_SERVICE_URL)


@dataclass(frozen=True)
class Marks:
    """The newest rows of the outside world before a case (the demo service's collections and
    meter, and the in-process SimCall meter): whatever the case creates is above them, so
    counts need no reset between cases."""

    article: int
    asset: int
    render: int
    charge: int
    meter: int
    simcall: int

    @classmethod
    def now(cls) -> Marks:
        from demo.models import SimCall

        top = service().marks()
        simcall = SimCall.objects.aggregate(m=Max("pk"))["m"] or 0
        return cls(
            top["publish"], top["upload"], top["render"], top["charge"], top["meter"], simcall
        )


@dataclass
class World:
    """What the outside world holds and was asked since a set of marks. Objects are the
    service's JSON ({"id": "art-3", "name": ..., "account": ...})."""

    articles: list[dict]
    assets: list[dict]
    renders: list[dict]
    charges: list[dict]
    # Publishes the platform executed (an article each), uploads and renders billed.
    publish_calls: int
    uploads_billed: int
    renders_billed: int

    @classmethod
    def since(cls, marks: Marks) -> World:
        world = service()
        return cls(
            articles=world.articles(after=marks.article),
            assets=world.assets(after=marks.asset),
            renders=world.renders(after=marks.render),
            charges=world.charges(after=marks.charge),
            publish_calls=world.count("publish", after=marks.meter),
            uploads_billed=world.count("upload", after=marks.meter),
            renders_billed=world.count("render", after=marks.meter),
        )


def metered_per_tool(marks: Marks) -> dict[str, int]:
    """Every request the outside world received since the marks (answered or not, billed or
    replayed, calls and lookups), per demo tool."""
    from collections import Counter

    from demo.models import SimCall

    counted: Counter[str] = Counter()
    for row in service().meter(after=marks.meter):
        counted[METERED_TOOLS[row["op"]]] += row["count"]
    for system in SimCall.objects.filter(pk__gt=marks.simcall).values_list("system", flat=True):
        counted[METERED_TOOLS[system]] += 1
    return dict(counted)


# --- Facts about one run -------------------------------------------------------------------


def final_artifacts(run) -> dict[str, str]:
    """sha256 per logical artifact name (facts, draft, image-*, form) of the newest checkpoint
    of every stage: content, not uri, so two runs compare."""
    from runs.ledger.checkpoints import latest_checkpoint
    from runs.pipeline import registry

    hashes: dict[str, str] = {}
    for stage in registry.get(run.pipeline).stage_names:
        checkpoint = latest_checkpoint(run, stage)
        if checkpoint is None:
            continue
        for entry in checkpoint.artifacts:
            hashes[entry["name"]] = entry["sha256"]
    return hashes


def chain_problems(run_pk: int) -> list[str]:
    """Seq must run 1..N without a gap and every hash link must hold."""
    from runs.ledger.verify import verify_chain
    from runs.models import Event

    problems = []
    seqs = list(Event.objects.filter(run_id=run_pk).order_by("seq").values_list("seq", flat=True))
    if seqs != list(range(1, len(seqs) + 1)):
        problems.append(f"seqs are not 1..{len(seqs)}: {seqs}")
    report = verify_chain(run_pk)
    if not report.ok:
        problems += report.problems
    return problems


def checkpoint_problems(run_pk: int) -> list[str]:
    """Every checkpoint seals a VERIFIED event of its own stage on its own run, and every
    VERIFIED event has its checkpoint: neither is ever observed without the other."""
    from runs.models import Checkpoint, Event

    problems = []
    events = {
        e.seq: e
        for e in Event.objects.filter(run_id=run_pk, type=Event.Type.VERIFIED).only(
            "seq", "stage", "type"
        )
    }
    sealed = set()
    for checkpoint in Checkpoint.objects.filter(run_id=run_pk):
        event = events.get(checkpoint.last_seq)
        if event is None or event.stage != checkpoint.stage:
            problems.append(f"{checkpoint.id} seals seq {checkpoint.last_seq}, not a VERIFIED")
        sealed.add(checkpoint.last_seq)
    for seq in sorted(set(events) - sealed):
        problems.append(f"VERIFIED #{seq} has no checkpoint")
    return problems


def once_problems(run, marks: Marks) -> list[str]:
    """Everything the crash matrix asks of a finished run, as a list of what broke (empty
    when nothing did): succeeded, every external effect once, every stage verified once
    (nothing redone), the log gap-free and every checkpoint sealed by its VERIFIED."""
    from runs.models import Event, Run

    run.refresh_from_db()
    world = World.since(marks)
    problems = []
    if run.status != Run.Status.SUCCEEDED:
        problems.append(f"{run.public_id} is {run.status}, not succeeded")
    if len(world.articles) != 1 or world.publish_calls != 1:
        problems.append(f"{len(world.articles)} articles, {world.publish_calls} publish calls")
    if sorted(a["name"] for a in world.assets) != ["body-1", "body-2", "cover"]:
        problems.append(f"assets uploaded: {sorted(a['name'] for a in world.assets)}")
    if world.uploads_billed != 3 or world.renders_billed != 3 or len(world.renders) != 3:
        problems.append(
            f"{world.uploads_billed} billed uploads, {len(world.renders)} renders "
            f"({world.renders_billed} billed)"
        )
    if len(world.charges) > 1:
        problems.append(f"the card was charged {len(world.charges)} times")
    verified = list(
        Event.objects.filter(run=run, type=Event.Type.VERIFIED).values_list("stage", flat=True)
    )
    if sorted(verified) != sorted(set(verified)):
        problems.append(f"a stage was verified twice: {verified}")
    return problems + chain_problems(run.pk) + checkpoint_problems(run.pk)


def event_payload(event) -> dict:
    """An event's payload, wherever it is stored (a large one is an artifact)."""
    import json

    from runs.ledger import artifacts

    return json.loads(artifacts.read(event.payload_ref)) if event.payload_ref else event.payload


def plan_kept_problems(run, plan, approved: Marks) -> list[str]:
    """The approved plan as a contract, checked from outside the engine: the calls the log
    shows after RESUMED, and the requests the outside world metered after the approval, per
    tool, must equal the plan's prediction exactly, and the engine must say PLAN_KEPT."""
    from collections import Counter
    from decimal import Decimal

    from runs.models import Event

    problems = []
    resumed = Event.objects.filter(run=run, type=Event.Type.RESUMED).order_by("-seq").first()
    if resumed is None:
        return ["no RESUMED event"]
    after = Event.objects.filter(run=run, seq__gt=resumed.seq)
    calls = Counter(event_payload(e)["tool"] for e in after.filter(type=Event.Type.TOOL_CALLED))
    predicted = plan.cost_resume
    if dict(calls) != predicted.calls:
        problems.append(f"calls {dict(calls)}, the plan said {predicted.calls}")
    # What each call cost as its outcome recorded it (a model call's money follows from its
    # tokens), and the tokens the model answers said they used.
    results = [event_payload(e) for e in after.filter(type=Event.Type.TOOL_RESULT)]
    money = sum((Decimal(r.get("cost", "0")) for r in results), Decimal(0))
    if money.quantize(Decimal("0.0001")) != Decimal(predicted.money):
        problems.append(f"calls cost ${money}, the plan said ${predicted.money}")
    tokens = Counter()
    for r in results:
        tokens.update(r.get("usage") or {})
    if {k: v for k, v in tokens.items() if v} != predicted.tokens:
        problems.append(f"tokens {dict(tokens)}, the plan said {predicted.tokens}")
    metered = metered_per_tool(approved)
    expected = dict(Counter(predicted.calls) + Counter(predicted.queries))
    if metered != expected:
        problems.append(f"targets metered {dict(metered)}, the plan said {dict(expected)}")
    verdicts = list(
        after.filter(type__in=(Event.Type.PLAN_KEPT, Event.Type.PLAN_DEVIATED)).values_list(
            "type", "payload"
        )
    )
    if [v[0] for v in verdicts] != [Event.Type.PLAN_KEPT]:
        problems.append(f"verdicts {verdicts}, not one PLAN_KEPT")
    return problems


# --- The supervisor ------------------------------------------------------------------------


def resolve_never_effects(plan, *, actor: str = "user:supervisor") -> list[str]:
    """What a supervisor does about a blocked NEVER charge: look it up at the card processor
    by the delivery key the charge carried (its Idempotency-Key), and record what was found,
    with a reason. Returns a line per resolution; a blocker it cannot resolve is left for the
    caller to report."""
    from runs.ledger.edits import edit_effect
    from runs.models import Effect
    from runs.planning.planner import Action

    done = []
    for line in plan.effects:
        if line.action != Action.BLOCKED or line.tool != "charge_card":
            continue
        effect = Effect.objects.get(delivery_key=line.delivery_key)
        charges = service().charges(delivery_key=effect.delivery_key)
        if charges:
            charged = charges[0]["id"]
            edit_effect(
                effect.pk,
                {"status": Effect.Status.CONFIRMED, "external_id": charged},
                reason=f"card processor shows {charged} for this delivery key",
                actor=actor,
            )
            done.append(f"{line.call_id}: charged as {charged} → confirmed")
        else:
            edit_effect(
                effect.pk,
                {"status": Effect.Status.FAILED, "error": "no charge at the processor"},
                reason="card processor shows no charge for this delivery key",
                actor=actor,
            )
            done.append(f"{line.call_id}: not charged → failed (may be called)")
    return done


# --- Reference -----------------------------------------------------------------------------

_REFERENCE: dict[str, str] | None = None


def reference_artifacts(workers: Workers) -> dict[str, str]:
    """The artifacts of a run without a crash, and a database in which the pipeline has
    finished a run.

    The content is computed once per process (it survives the test database being flushed
    between tests), but the run itself is made again in a flushed database: a plan estimates
    each model call from the same call's last confirmed answer in the pipeline
    (runs/planning/model_lines.py), and plan-kept holds that estimate exact, so every case
    starts where the pipeline has answered once, as it does for the first case."""
    global _REFERENCE
    from runs.models import Run

    if (
        _REFERENCE is not None
        and Run.objects.filter(pipeline=PIPELINE, status=Run.Status.SUCCEEDED).exists()
    ):
        return _REFERENCE
    artifacts = _clean_run(workers)
    if _REFERENCE is not None and artifacts != _REFERENCE:
        raise AssertionError(f"a run without a crash made {artifacts}, before {_REFERENCE}")
    _REFERENCE = artifacts
    return _REFERENCE


def _clean_run(workers: Workers) -> dict[str, str]:
    from runs import engine
    from runs.models import Run

    run = engine.start_run(
        PIPELINE, {"account": new_account("ref")}, actor="fault-matrix:reference"
    )
    worker = workers.start("reference")
    try:
        status = wait_settled(run.pk, timeout=120)
    finally:
        workers.stop(worker)
    if status != Run.Status.SUCCEEDED:
        raise AssertionError(f"the reference run without a crash ended {status}")
    run.refresh_from_db()
    return final_artifacts(run)


# --- One case ------------------------------------------------------------------------------


def run_case(case: Case, workers: Workers, reference: dict[str, str]) -> CaseResult:
    """Drive one crash case end to end and check every invariant. Never raises for a case
    that fails: the result says what went wrong."""
    started = time.monotonic()
    result = CaseResult(case)
    try:
        _drive(case, workers, reference, result)
    except Exception as exc:  # a hung or broken case is a failed case, reported as such
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        result.logs = [str(p) for p in workers.log_paths.values()]
        workers.stop_all()
        workers.log_paths.clear()
        result.seconds = time.monotonic() - started
    return result


def _drive(case: Case, workers: Workers, reference: dict[str, str], result: CaseResult) -> None:
    from demo import faults
    from runs.models import Run, StoredPlan
    from runs.pipeline import registry
    from runs.planning.planner import compute_plan

    pipeline = registry.get(PIPELINE)
    marks = Marks.now()
    inputs = {"account": new_account(case.stage)}
    run = faults.start_run(
        PIPELINE,
        {**inputs, "review": "on"} if case.reviewed else inputs,
        actor="fault-matrix",
        faults={"crash": case.point},
    )
    result.run_id = run.public_id

    doomed = workers.start(f"{case.stage}-{case.call}-{case.when}-doomed")
    # Either the worker dies at the crash point or the run stops for another reason (which
    # is then reported instead of waiting out a long timeout); a gate on the way is answered.
    while True:
        wait_for(
            lambda: doomed.poll() is not None or run_status(run.pk) not in Run.ACTIVE,
            timeout=120,
            what="the worker to reach the crash point",
        )
        waiting = doomed.poll() is None and run_status(run.pk) == Run.Status.WAITING
        if not (waiting and answer_open_gates(run.pk, dict(case.edits))):
            break
    crashed = doomed.poll() == -signal.SIGKILL
    result.check("crashed", crashed, f"worker exit {doomed.poll()}, run {run_status(run.pk)}")
    if not crashed:
        return

    workers.start("healthy")  # its sweeper notices the dead worker's lease
    wait_for(
        lambda: run_status(run.pk) != Run.Status.RUNNING,
        timeout=90,
        what="the sweeper to notice the dead worker",
    )
    status = run_status(run.pk)
    result.check("interrupted", status == Run.Status.INTERRUPTED, f"run is {status}")
    if status != Run.Status.INTERRUPTED:
        return

    run.refresh_from_db()
    # The stop has a worker compute the stored plan, which asks the targets; once it is
    # stored, no worker is left to act before the approval, so the outside world's meters
    # read after the approval hold only what the resumed work asked.
    wait_for(
        lambda: StoredPlan.objects.filter(run=run, run_version=run.version).exists(),
        timeout=60,
        what="the stored plan",
    )
    # The sweeper lets the lease go after the stop's after-commit work; stopped before that,
    # it would leave the lease held and a supervisor's ledger edit refused.
    wait_lease_free(run)
    workers.stop_all()
    plan = compute_plan(run)
    before = list(pipeline.stage_names[: pipeline.index(case.stage)])
    result.check(
        "resumes-at-crash",
        plan.next_stage == case.stage and plan.stages_skipped == before,
        f"plan resumes at {plan.next_stage!r}, skipping {plan.stages_skipped}",
    )
    resume_and_check(result, run, plan, workers, marks, reference)


def resume_and_check(
    result: CaseResult, run, plan, workers: Workers, marks: Marks, reference: dict[str, str]
) -> None:
    """The second half of every fault case, crash or network: a supervisor resolves what
    blocks the stopped run's plan in the ledger, an operator approves the strict resume, fresh
    workers carry it out, and every invariant is checked on what it did to the world."""
    from runs.models import ApprovalMode, Run
    from runs.planning.planner import compute_plan
    from runs.planning.resume import approve

    if plan.blockers:
        result.supervisor = "; ".join(resolve_never_effects(plan)) or "nothing to resolve"
        run.refresh_from_db()
        plan = compute_plan(run)
        if plan.blockers:
            result.error = "the plan stays blocked: " + " ".join(plan.blockers)
            return

    approve(run, ApprovalMode.STRICT, plan.fingerprint, actor="user:fault-matrix")
    approved = Marks.now()  # what the resumed work does to the world is above these
    workers.start("resume")
    edits = dict(result.case.edits) if isinstance(result.case, Case) else {}
    status = settle_answering(run.pk, timeout=120, edits=edits)
    run.refresh_from_db()
    result.check("succeeded", status == Run.Status.SUCCEEDED, f"run ended {status}")
    problems = plan_kept_problems(run, plan, approved)
    result.check("plan-kept", not problems, "; ".join(problems))
    world_checks(result, run, marks, reference)
    if "gate-asked-once" in result.invariants:
        gate_checks(result, run)
    if "no-call-remade" in result.invariants:
        problems = remade_calls(run)
        result.check("no-call-remade", not problems, "; ".join(problems))
        problems = plan_gate_problems(run, plan)
        result.check("plan-gates-kept", not problems, "; ".join(problems))
    if edits:
        problems = edit_problems(run, result.case, marks)
        result.check("edit-kept", not problems, "; ".join(problems))


# --- Gates ---------------------------------------------------------------------------------


def answer_open_gates(run_pk: int, edits: dict[str, str] | None = None) -> list[str]:
    """The matrix's people answer every gate the run waits at, as it was asked: an operator
    approves the review unedited, a supervisor approves the charge (with `edits` to its
    arguments, in an edited case). Returns what they answered."""
    from runs.gates import answers
    from runs.gates.acts import TICK
    from runs.models import Gate, GateKind, GateStatus

    done = []
    for gate in Gate.objects.filter(run_id=run_pk, status=GateStatus.OPEN).order_by("pk"):
        data = dict(gate.initial)
        if gate.kind == GateKind.CONFIRM:
            # Approved with the tick that names its act (the charge's money).
            data = {"decision": "approve", TICK: "on"} | {
                f"arg_{n}": v for n, v in (edits or {}).items()
            }
        answers.answer(gate.pk, data, actor=GATE_PEOPLE[gate.role], roles=frozenset({gate.role}))
        done.append(f"{gate.stage}/{gate.gate_id}")
    return done


def settle_answering(
    run_pk: int, *, timeout: float = 120, edits: dict[str, str] | None = None
) -> str:
    """Wait until the run stops being active, answering each gate it waits at on the way;
    returns the status it ends in."""
    from runs.models import Run

    while True:
        status = wait_settled(run_pk, timeout=timeout)
        if status != Run.Status.WAITING or not answer_open_gates(run_pk, edits):
            return status


def gate_problems(run) -> tuple[list[str], list[str]]:
    """(gates asked twice, gates not answered exactly once) from the run's events: per stage
    and gate, at most one GATE_OPENED (one more for each time it expired), and one final
    HUMAN_ANSWERED per gate asked; a reviewed demo run asks its review and its charge."""
    from collections import Counter

    from runs.models import Event

    def counted(type_, keep=lambda payload: True) -> Counter:
        events = Event.objects.filter(run=run, type=type_)
        payloads = [(e.stage, event_payload(e)) for e in events]
        return Counter((stage, p["gate"]) for stage, p in payloads if "gate" in p and keep(p))

    opened = counted(Event.Type.GATE_OPENED)
    expired = counted(Event.Type.FAILED, lambda p: p.get("timed_out"))
    final = counted(Event.Type.HUMAN_ANSWERED, lambda p: p.get("final"))
    twice = [
        f"{s}/{g} asked {n} times"
        for (s, g), n in sorted(opened.items())
        if n > 1 + expired[(s, g)]
    ]
    answered = [
        f"{s}/{g} answered {final[(s, g)]} times"
        for (s, g) in sorted(set(opened) | set(final))
        if final[(s, g)] != 1
    ]
    if run.inputs.get("review") == "on":
        expected = {("publish", "review"), ("publish", "promote-charge")}
        if set(opened) != expected:
            answered.append(f"gates asked {sorted(opened)}, expected {sorted(expected)}")
    return twice, answered


def edit_problems(run, case: Case, marks: Marks) -> list[str]:
    """What an edited case asks beyond the rest: the confirmed call made once, with the edited
    arguments, as the outside world, the ledger's row (its request and its price) and the
    answer's diff say it. The demo's edited call is its charge, priced at its amount."""
    from decimal import Decimal

    from runs.models import Effect, Event

    edits = dict(case.edits)
    problems = []
    charges = World.since(marks).charges
    if [c["amount"] for c in charges] != [edits["amount"]]:
        problems.append(f"charged {[c['amount'] for c in charges]}, edited to {edits['amount']}")
    effect = Effect.objects.filter(run=run, call_id=case.call).first()
    sent = {n: effect.request.get(n) for n in edits} if effect is not None else None
    if sent != edits or effect.cost != Decimal(edits["amount"]):
        problems.append(f"the ledger's row was sent {sent} at ${getattr(effect, 'cost', None)}")
    answered = [
        event_payload(e)
        for e in Event.objects.filter(run=run, type=Event.Type.HUMAN_ANSWERED)
        if event_payload(e).get("gate") == case.call
    ]
    if [{n: d[1] for n, d in a["diff"].items()} for a in answered] != [edits]:
        problems.append(f"answers' diffs {[a['diff'] for a in answered]}")
    return problems


def remade_calls(run) -> list[str]:
    """The calls made again after a stage was handed their result in this run: a TOOL_CALLED
    of a (stage, call id) after a TOOL_RESULT of it that answered (not a refusal, not an
    unknown outcome: those may be made again)."""
    from runs.models import Event

    answered: set[tuple[str, str]] = set()
    remade = []
    for event in Event.objects.filter(
        run=run, type__in=(Event.Type.TOOL_CALLED, Event.Type.TOOL_RESULT)
    ).order_by("seq"):
        payload = event_payload(event)
        where = (event.stage, payload.get("call", ""))
        if event.type == Event.Type.TOOL_CALLED and where in answered:
            remade.append(f"{where[0]}/{where[1]} called again at #{event.seq}")
        elif event.type == Event.Type.TOOL_RESULT and payload.get("status", "") not in (
            "failed",
            "unknown",
            "conflict",
        ):
            answered.add(where)
    return remade


def plan_gate_problems(run, plan) -> list[str]:
    """The gates the resumed work opened (after RESUMED) against the plan's gate lines: only
    gates the plan said it may ask, every one it said it asks again (an asked gate's line),
    and none it said was answered. A declared gate never asked yet is a "may ask": its
    condition (the demo's review=on) decides."""
    from runs.gates.decision import GateAction
    from runs.models import Event

    resumed = Event.objects.filter(run=run, type=Event.Type.RESUMED).order_by("-seq").first()
    if resumed is None:
        return ["no RESUMED event"]
    opened = sorted(
        (e.stage, event_payload(e)["gate"])
        for e in Event.objects.filter(run=run, seq__gt=resumed.seq, type=Event.Type.GATE_OPENED)
    )
    may = {(g.stage, g.gate_id) for g in plan.gates if g.action == GateAction.ASK}
    must = {(g.stage, g.gate_id) for g in plan.gates if g.action == GateAction.ASK and g.kind}
    answered = {(g.stage, g.gate_id) for g in plan.gates if g.action == GateAction.USE_ANSWER}
    problems = []
    if not must <= set(opened) <= may:
        problems.append(
            f"gates opened {opened}, the plan said it asks {sorted(must)} of {sorted(may)}"
        )
    again = sorted(set(opened) & answered)
    if again:
        problems.append(f"asked again though the plan said answered: {again}")
    return problems


def gate_checks(result: CaseResult, run) -> None:
    twice, answered = gate_problems(run)
    result.check("gate-asked-once", not twice, "; ".join(twice))
    result.check("gate-answered-once", not answered, "; ".join(answered))


def world_checks(result: CaseResult, run, marks: Marks, reference: dict[str, str]) -> None:
    """What a finished case must have left in the outside world and the ledger: one article,
    one billed upload per asset, one billed render per key, at most one charge, every effect
    settled, outputs naming what is live, the reference artifacts, a sound log."""
    from runs.ledger.checkpoints import latest_checkpoint
    from runs.models import Effect
    from runs.pipeline import registry

    pipeline = registry.get(PIPELINE)
    world = World.since(marks)
    slots = sorted(a["name"] for a in world.assets)
    account = run.inputs["account"]
    result.check(
        "one-article",
        len(world.articles) == 1 and world.publish_calls == 1,
        f"{len(world.articles)} article(s), {world.publish_calls} publish call(s)",
    )
    result.check(
        "one-upload-per-asset",
        slots == ["body-1", "body-2", "cover"] and world.uploads_billed == 3,
        f"assets {slots}, {world.uploads_billed} billed upload(s)",
    )
    result.check(
        "renders-billed-once",
        len(world.renders) == 3 and world.renders_billed == 3,
        f"{len(world.renders)} render(s), {world.renders_billed} billed",
    )
    charges = [c for c in world.charges if c["account"] == account]
    result.check(
        "charge-at-most-once",
        len(world.charges) <= 1 and len(charges) == len(world.charges),
        f"{len(world.charges)} charge(s)",
    )

    effects = list(Effect.objects.filter(run=run))
    expected = [
        (stage.name, call.call_id)
        for stage in pipeline.stages
        for call in stage.calls
        if pipeline.tool(call.tool).policy != "SAFE"
    ]
    unsettled = [
        f"{e.call_id}={e.status}"
        for e in effects
        if e.status != Effect.Status.CONFIRMED or not e.external_id
    ]
    result.check(
        "ledger-settled",
        not unsettled and sorted((e.stage, e.call_id) for e in effects) == sorted(expected),
        f"{len(effects)} effect(s), unsettled: {unsettled}",
    )

    publish_cp = latest_checkpoint(run, "publish")
    outputs = publish_cp.outputs if publish_cp is not None else {}
    live = [a["id"] for a in world.articles]
    charged = [c["id"] for c in world.charges]
    result.check(
        "outputs-match-world",
        publish_cp is not None
        and [outputs.get("article_id")] == live
        and [outputs.get("charge_id")] == charged,
        f"outputs {outputs.get('article_id')!r}/{outputs.get('charge_id')!r}, "
        f"world {live}/{charged}",
    )

    got = final_artifacts(run)
    differ = sorted(
        name for name in set(got) | set(reference) if got.get(name) != reference.get(name)
    )
    result.check("artifacts-equal", not differ, f"differ from the reference: {differ}")
    problems = chain_problems(run.pk)
    result.check("seq-gap-free", not problems, "; ".join(problems))
    problems = checkpoint_problems(run.pk)
    result.check("checkpoints-verified", not problems, "; ".join(problems))


# --- Report --------------------------------------------------------------------------------


def format_report(
    results: Iterable[CaseResult],
    *,
    invariants: dict[str, str] = INVARIANTS,
    title: str = (
        "Fault matrix: crash before/after every tool call and around every gate, strict "
        "resume, invariants"
    ),
    summary: bool = True,
) -> Iterator[str]:
    """The matrix: one row per case, one column per invariant (✓ held, ✗ broken, · not
    reached), then per-invariant counts, then the `N passed, M failed` line, last (unless
    `summary` is off, for a report that another one follows)."""
    results = list(results)
    names = list(invariants)
    width = max([len(r.case.id) for r in results] + [4])
    yield title
    yield ""
    for i, name in enumerate(names):
        yield f"  [{i + 1:>2}] {name}: {invariants[name]}"
    yield ""
    header = " ".join(f"{i + 1:>2}" for i in range(len(names)))
    yield f"{'case':<{width}}  {header}  result   secs  supervisor"
    for r in results:
        marks = " ".join(
            f"{('✓' if r.checks[n].passed else '✗') if n in r.checks else '·':>2}" for n in names
        )
        yield (
            f"{r.case.id:<{width}}  {marks}  {'PASS' if r.passed else 'FAIL':<6} "
            f"{r.seconds:>5.1f}  {r.supervisor}"
        )
    yield ""
    yield "Invariants (held / checked):"
    for name in names:
        checked = [r.checks[name] for r in results if name in r.checks]
        held = sum(1 for c in checked if c.passed)
        yield f"  {name:<22} {held:>3} / {len(checked):<3} {invariants[name]}"
    failed = [r for r in results if not r.passed]
    if failed:
        yield ""
        yield "Failures:"
        for r in failed:
            yield r.describe()
    if summary:
        yield ""
        yield f"{len(results) - len(failed)} passed, {len(failed)} failed"
