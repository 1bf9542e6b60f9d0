"""The durable tool call: what one `ctx.call` costs, per replay policy, beside the database's
own floor (one plain one-row INSERT committed).

    .venv/bin/python bench/tool_call.py                      # SQLite and PostgreSQL
    .venv/bin/python bench/tool_call.py --db sqlite --rounds 3
    .venv/bin/python bench/tool_call.py --cases http,http-flushed  # the HTTP tool alone

The unit is the one ../shared/peers/ measures for DBOS and LangGraph: one stage makes N calls
of a trivial tool (`{"external_id": i + 1}`) through ctx.call, run in-process through
engine.execute (lease, STARTED, the calls, VERIFIED + checkpoint), so no RQ time is counted.
The cost of a call is the marginal one, (t(N_hi) - t(N_lo)) / (N_hi - N_lo): the stage's
fixed work cancels out. N is 200 and 1000 by default, as in ../shared/peers/ (at 50 and 250
a case's rounds wandered by a third here). Cases, interleaved round after round so outside
load hits all alike:

  * safe:            SAFE tool: TOOL_CALLED + TOOL_RESULT, no effect row;
  * idempotent:      IDEMPOTENT, first attempt: the intent (effect row + TOOL_CALLED) is
                     committed, the call is fenced by the lease, the outcome is committed;
  * reconcile-first: RECONCILE_FIRST, first attempt (nothing to reconcile yet);
  * never:           NEVER, first attempt;
  * reuse:           a strict resume of a stage whose effects are all confirmed but the last
                     (the worker "died" on it): every call is a memoized re-use of a confirmed
                     effect, held against the approved plan;
  * safe-flushed, idempotent-flushed (PostgreSQL only): safe and idempotent with
                     RESUMER_DEFER_FLUSH off, every commit waiting for the disk. By default a
                     SAFE call's events, a confirmed outcome and a re-use do not wait (an
                     intent does: runs/ledger/append.py); these show what that buys. SQLite's
                     default (NORMAL) never waits for the disk, so there they would repeat
                     safe and idempotent (bench/peers_call.py measures FULL);
  * http, http-flushed: an IDEMPOTENT http_tool (runs/tools/http.py) POSTing to a tiny local
                     HTTP target the bench starts (a process of its own answering
                     {"id": n} at once), so the call, its recorded exchanges and the
                     transaction its outcome is written in are all counted; http-flushed is
                     the same with RESUMER_DEFER_FLUSH off. The ratio printed is what the
                     deferred outcome buys a real HTTP call (issue 29). Run on SQLite too,
                     where no commit waits for the disk: there the ratio is the noise;
  * append:          one runs.ledger.append.append() of a TOOL_RESULT-sized event, in its own
                     transaction, by a lease holder;
  * event-row:       one INSERT of that event's row into the ledger's event table, committed,
                     with no fence, no chain and no head move: what the table itself costs
                     (its row, its two indexes, its foreign key), the bound under an append;
  * floor:           one INSERT of five of the event's columns into a plain table (primary key
                     only), committed in autocommit: the database's own floor.

Statements per call are counted the same marginal way (every statement Django executes,
SQLite's BEGIN IMMEDIATE and COMMIT included; the counting wrapper sends the append path's
statements through Django's cursor, so none runs unseen on the driver's), and so are commits (a COMMIT, Django's own
commit(), or a write in autocommit, which is its own transaction). Beside each median, the
lowest and highest round show how far the machine let them wander. The figures printed are
ratios measured in this one run; absolute milliseconds vary by machine. The goals (issue 10)
are printed with them. The peers' step (LangGraph, DBOS) is measured by
../shared/peers/side_by_side.sh (run it with DEBUG=0: production settings). `--profile CASE`
prints a cProfile of one case instead (BENCH_PROFILE_SORT=tottime to sort by own time).

Each database is a scratch one (a SQLite file in a temp folder with the settings' WAL and
IMMEDIATE options; PostgreSQL database `resumer_toolcallbench` on BENCH_PG_URL's server,
created and dropped; BENCH_PG_DATABASE names another, for a server others bench on too).
Redis: BENCH_REDIS_URL (default redis://127.0.0.1:6379/12), which the resume's job dispatch
writes to; it is flushed afterwards, so give it a database nobody else uses.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common

PG_DATABASE = os.environ.get("BENCH_PG_DATABASE", "resumer_toolcallbench")
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/12")
CASES = ("safe", "idempotent", "reconcile-first", "never", "reuse")
FLUSHED = ("safe-flushed", "idempotent-flushed")
HTTP = ("http", "http-flushed")  # on both databases
POLICIES = {
    "safe": "SAFE",
    "idempotent": "IDEMPOTENT",
    "reconcile-first": "RECONCILE_FIRST",
    "never": "NEVER",
}
RESULT_PAYLOAD = {"call": "c17", "tool": "inc", "result": {"external_id": "18"}, "cost": "0"}


# --- child: one database ---------------------------------------------------------------------


def child(
    db: str, n_lo: int, n_hi: int, rounds: int, profile: str = "", only: tuple[str, ...] = ()
) -> None:
    _common.setup_django(migrate=False)
    from contextlib import nullcontext

    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection

    from runs import engine
    from runs.events import RunCreated, ToolResult, where
    from runs.execution.hooks import CallHooks
    from runs.ledger import leases
    from runs.ledger import sql as dialects
    from runs.ledger.append import Writer, append, create_run
    from runs.ledger.chain import canonical_json
    from runs.models import ApprovalMode, Effect, Event, ReplayPolicy, Run
    from runs.pipeline import (
        Call,
        Input,
        KeyParts,
        OutcomeUnknown,
        Pipeline,
        Reconciliation,
        Stage,
        StageOutput,
        Tool,
        registry,
    )
    from runs.planning import resume
    from runs.planning.planner import compute_plan
    from runs.tools.http import http_tool

    call_command("migrate", verbosity=0)

    def inc(args: dict, key: str) -> dict:
        return {"external_id": str(args["i"] + 1)}

    def key(ctx, args: dict) -> KeyParts:
        return KeyParts("acct", "bench", f"{ctx.run_id}-{args['i']}", "1")

    def not_found(effect: Effect) -> Reconciliation:
        return Reconciliation(found=False, detail="bench target keeps nothing")

    def loop(ctx) -> StageOutput:
        n = int(ctx.inputs["n"])
        for i in range(n):
            ctx.call(f"c{i}", "inc", i=i)
        return StageOutput(outputs={"n": n})

    def pipeline(name: str, policy: str, calls: int = 0, tool: Tool | None = None) -> Pipeline:
        tool = tool or Tool(
            "inc",
            ReplayPolicy(policy),
            call=inc,
            key=None if policy == "SAFE" else key,
            reconcile=not_found if policy == "RECONCILE_FIRST" else None,
        )
        return Pipeline(
            name=name,
            inputs=(Input("n", current=lambda pinned: "0", versioned=False),),
            tools=(tool,),
            stages=(
                Stage(
                    "loop",
                    loop,
                    consumes=("n",),
                    tools=("inc",),
                    # Declared for the planner, so a resume's plan names every call.
                    calls=tuple(Call(f"c{i}", "inc") for i in range(calls)),
                ),
            ),
        )

    pipelines = {case: pipeline(f"bench_{case}", policy) for case, policy in POLICIES.items()}
    # The HTTP case's target: a process of its own, so its serving takes no turn of this
    # one's interpreter.
    target = subprocess.Popen(
        [sys.executable, __file__, "--target"], stdout=subprocess.PIPE, text=True
    )
    atexit.register(target.terminate)
    target_url = target.stdout.readline().strip()
    pipelines["http"] = pipeline(
        "bench_http",
        "IDEMPOTENT",
        tool=http_tool(
            "inc",
            ReplayPolicy.IDEMPOTENT,
            url="/calls",
            base_url=target_url,
            body=lambda args, key: {"i": args["i"]},
            key=key,
            external_id="id",
            target="bench target",
            trust_env=False,
        ),
    )
    for n in (n_lo, n_hi):
        pipelines[f"reuse-{n}"] = pipeline(f"bench_reuse_{n}", "IDEMPOTENT", calls=n)
    registry._pipelines = {p.name: p for p in pipelines.values()}
    settings.RESUMER_PIPELINES = []

    class DiesOnLastCall(CallHooks):
        """The worker 'dies' on the stage's last call: its outcome is unknown, the run stops."""

        def __init__(self, n: int) -> None:
            self.last = f"c{n - 1}"

        def after_call(self, ctx, call_id: str, result) -> None:
            if call_id == self.last:
                raise OutcomeUnknown("bench: the worker died on the last call")

    def stage_time(case: str, n: int, probe=nullcontext) -> float:
        """Seconds one stage of n calls takes in engine.execute (`probe` wraps just that)."""
        if case.endswith("-flushed"):
            settings.RESUMER_DEFER_FLUSH = False
            try:
                return stage_time(case.removesuffix("-flushed"), n, probe)
            finally:
                settings.RESUMER_DEFER_FLUSH = True
        if case != "reuse":
            run = engine.start_run(
                pipelines[case].name, {"n": str(n)}, actor="bench", enqueue=False
            )
            with probe():
                t0 = time.perf_counter()
                outcome = engine.execute(run.pk, "loop", run.ticket, holder="bench")
                elapsed = time.perf_counter() - t0
            assert outcome == engine.Outcome.VERIFIED, outcome
            return elapsed
        name = pipelines[f"reuse-{n}"].name
        run = engine.start_run(name, {"n": str(n)}, actor="bench", enqueue=False)
        outcome = engine.execute(
            run.pk, "loop", run.ticket, holder="bench", hooks=DiesOnLastCall(n)
        )
        assert outcome == engine.Outcome.STOPPED, outcome
        plan = compute_plan(run)
        assert plan.resumable and not plan.blockers, plan.blockers
        resume.approve(run, ApprovalMode.STRICT, plan.fingerprint, actor="bench")
        run.refresh_from_db()
        with probe():
            t0 = time.perf_counter()
            outcome = engine.execute(run.pk, "loop", run.ticket, holder="bench")
            elapsed = time.perf_counter() - t0
        assert outcome == engine.Outcome.VERIFIED, outcome
        kept = Event.objects.filter(run=run, type=Event.Type.PLAN_KEPT).count()
        reused = Event.objects.filter(where(ToolResult, reused=True), run=run)
        assert kept == 1 and reused.count() == n - 1, (kept, reused.count())
        return elapsed

    # The floor and the bare append.
    with connection.cursor() as cursor:
        cursor.execute(_common.FLOOR_DDL[connection.vendor])
    holder = create_run(
        pipelines["safe"].name,
        RunCreated(input_versions={"n": "0"}),
        actor="bench",
        first_stage="loop",
    )
    writer = Writer(holder.pk, leases.acquire(holder.pk, "bench", ttl=24 * 3600), "bench")
    floor_payload = canonical_json(RESULT_PAYLOAD)

    def floor_time(n: int, probe=nullcontext) -> float:
        # Autocommit: the statement is its own transaction, as the peers' floor is.
        with probe():
            t0 = time.perf_counter()
            for i in range(n):
                with connection.cursor() as cursor:
                    cursor.execute(
                        _common.FLOOR_INSERT, (holder.pk, i, "TOOL_RESULT", floor_payload, "f" * 64)
                    )
            return time.perf_counter() - t0

    # The event row alone, in the ledger's own table, with none of the append's work: a run
    # of its own whose head never moves (a scratch database; nobody verifies it).
    loose = create_run(
        pipelines["safe"].name,
        RunCreated(input_versions={"n": "0"}),
        actor="bench",
        first_stage="loop",
    )
    insert = dialects.for_connection(connection).insert
    loose_seq = [1]

    def event_row_time(n: int, probe=nullcontext) -> float:
        with probe():
            t0 = time.perf_counter()
            for _ in range(n):
                loose_seq[0] += 1
                row = (loose.pk, loose_seq[0], "loop", "TOOL_RESULT", "{}", floor_payload, "",
                       "[]", "", "bench", None, "p" * 64, "h" * 64)  # fmt: skip
                with connection.cursor() as cursor:
                    cursor.execute(insert, row)
            return time.perf_counter() - t0

    def append_time(n: int, probe=nullcontext) -> float:
        with probe():
            t0 = time.perf_counter()
            for _ in range(n):
                append(writer, ToolResult(stage="loop", **RESULT_PAYLOAD))
            return time.perf_counter() - t0

    cases = (*CASES, *FLUSHED, *HTTP) if connection.vendor == "postgresql" else (*CASES, *HTTP)
    cases = tuple(case for case in cases if not only or case in only)
    # Warm every path (imports, the registry, statement caches) before measuring.
    for case in cases:
        stage_time(case, n_lo)
    floor_time(n_lo)
    event_row_time(n_lo)
    append_time(n_lo)

    if profile:
        # Where one case's time goes, for whoever works on it: a profile, no figures.
        import cProfile
        import pstats

        profiler = cProfile.Profile()

        @contextmanager
        def profiling():
            profiler.enable()
            yield
            profiler.disable()

        (append_time if profile == "append" else lambda n, probe: stage_time(profile, n, probe))(
            n_hi, probe=profiling
        )
        pstats.Stats(profiler, stream=sys.stderr).sort_stats(
            os.environ.get("BENCH_PROFILE_SORT", "cumulative")
        ).print_stats(40)
        _common.emit_result({"db": db, "profiled": profile})
        return

    measure = {
        case: (lambda n, probe=nullcontext, c=case: stage_time(c, n, probe)) for case in cases
    }
    measure["append"] = append_time
    measure["event-row"] = event_row_time
    measure["floor"] = floor_time
    # A bare write costs a tenth of a call: ten times the writes, so that a SQLite WAL
    # checkpoint falling into one of the two timings does not swamp the difference.
    scale = {"append": 10, "event-row": 10, "floor": 10}
    marginal: dict[str, list[float]] = {name: [] for name in measure}
    for _ in range(rounds):
        for name, timed in measure.items():
            k = scale.get(name, 1)
            lo, hi = timed(n_lo * k), timed(n_hi * k)
            marginal[name].append((hi - lo) / ((n_hi - n_lo) * k) * 1000)
    ms = {name: statistics.median(values) for name, values in marginal.items()}
    # What one round gave against another: on a shared machine (or a disk whose flushes vary)
    # a case's rounds can differ by a quarter, which a ratio of medians hides.
    spread = {name: [min(values), max(values)] for name, values in marginal.items()}

    # Statements and commits: the same marginal way, once, counted around the timed part.
    # A commit is Django's connection.commit() (an atomic block ending) or a statement after
    # which the driver is outside a transaction: a COMMIT the append path sent itself, or a
    # write in autocommit, which is its own transaction.
    counts = {"statements": 0, "commits": 0}

    def in_transaction() -> bool:
        raw = connection.connection
        if connection.vendor == "sqlite":
            return raw.in_transaction
        from psycopg.pq import TransactionStatus

        return raw.info.transaction_status != TransactionStatus.IDLE

    def count_statement(execute, sql, params, many, context):
        counts["statements"] += 1
        result = execute(sql, params, many, context)
        verb = sql.lstrip().split(None, 1)[0].upper()
        if verb not in ("SELECT", "ROLLBACK", "BEGIN", "PRAGMA") and not in_transaction():
            counts["commits"] += 1
        return result

    @contextmanager
    def counting():
        plain_commit = connection.commit

        def counting_commit() -> None:
            counts["commits"] += 1
            plain_commit()

        connection.commit = counting_commit
        try:
            with connection.execute_wrapper(count_statement):
                yield
        finally:
            del connection.commit

    statements: dict[str, float] = {}
    transactions: dict[str, float] = {}
    for name, timed in measure.items():
        seen = []
        for n in (n_lo, n_hi):
            counts.update(statements=0, commits=0)
            timed(n, probe=counting)
            seen.append(dict(counts))
        statements[name] = (seen[1]["statements"] - seen[0]["statements"]) / (n_hi - n_lo)
        transactions[name] = (seen[1]["commits"] - seen[0]["commits"]) / (n_hi - n_lo)

    runs_done = Run.objects.filter(status=Run.Status.SUCCEEDED).count()
    _common.emit_result(
        {
            "db": db,
            "ms": ms,
            "spread": spread,
            "rounds": marginal,
            "statements": statements,
            "commits": transactions,
            "runs": runs_done,
        }
    )


# --- the HTTP case's target ------------------------------------------------------------------


class _Answer(BaseHTTPRequestHandler):
    """Answers every POST with the next id at once: a target that costs as little as one can."""

    protocol_version = "HTTP/1.1"
    count = 0

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        _Answer.count += 1
        body = json.dumps({"id": str(_Answer.count)}).encode()
        self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args) -> None:
        pass


def serve_target() -> None:
    """Serve on a free local port until killed; the first line printed is its URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Answer)
    print(f"http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()


# --- parent ----------------------------------------------------------------------------------


GOALS = (
    # (what, numerator case, denominator case, at most)
    ("non-SAFE call / SAFE call", "worst non-safe", "safe", 1.3),
    ("reuse / SAFE call", "reuse", "safe", 1.0),
)
# Printed beside the goals, not held to them: the same ratio with every commit flushed.
AS_WELL = (("  (every commit flushed)", "idempotent-flushed", "safe-flushed"),)
# What the deferred confirmed outcome buys an HTTP call: the same call, its outcome and its
# exchanges' transaction not waiting for the disk, against every commit waiting.
HTTP_RATIO = ("HTTP call, deferred / waiting", "http", "http-flushed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--n-lo", type=int, default=200)
    parser.add_argument("--n-hi", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--profile",
        choices=(*CASES, *FLUSHED, *HTTP, "append"),
        help="print a cProfile of one case (N = --n-hi calls) instead of the figures",
    )
    parser.add_argument(
        "--cases",
        default="",
        help="comma-separated stage cases to measure (default: all); append, event-row and "
        "floor are always measured",
    )
    parser.add_argument("--child", choices=("sqlite", "postgres"), help=argparse.SUPPRESS)
    parser.add_argument("--target", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.target:
        serve_target()
        return
    only = tuple(case for case in args.cases.split(",") if case)
    unknown = set(only) - {*CASES, *FLUSHED, *HTTP}
    if unknown:
        parser.error(f"unknown cases: {', '.join(sorted(unknown))}")
    if args.child:
        child(args.child, args.n_lo, args.n_hi, args.rounds, args.profile or "", only)
        return

    print(
        f"ctx.call per policy, marginal over N={args.n_lo}..{args.n_hi} calls per stage, "
        f"median of {args.rounds} rounds"
    )
    results = []
    for db in ("sqlite", "postgres") if args.db == "both" else (args.db,):
        with _common.scratch_database(db, PG_DATABASE, "resumer-toolcall-") as scratch:
            if scratch is None:
                continue
            url, var_dir = scratch
            env = _common.child_env(url, var_dir)
            env["REDIS_URL"] = REDIS_URL
            try:
                result = _common.run_child(
                    Path(__file__),
                    [
                        "--child",
                        db,
                        "--n-lo",
                        str(args.n_lo),
                        "--n-hi",
                        str(args.n_hi),
                        "--rounds",
                        str(args.rounds),
                        *(["--profile", args.profile] if args.profile else []),
                        *(["--cases", args.cases] if only else []),
                    ],
                    env,
                )
            finally:
                _flush_redis()
            if not args.profile:
                results.append(result)

    if args.profile:
        return
    failures = []
    for result in results:
        ms, st, commits = result["ms"], result["statements"], result["commits"]
        floor = ms["floor"]
        print(f"\n{result['db']}: ms per call (x floor = one plain one-row INSERT committed)")
        print(
            f"  {'case':<18} {'ms':>7} {'rounds min-max':>15} {'x floor':>8} {'statements':>11} "
            f"{'commits':>8}"
        )
        for name in (*CASES, *FLUSHED, *HTTP, "append", "event-row", "floor"):
            if name not in ms:
                continue
            low, high = result["spread"][name]
            print(
                f"  {name:<18} {ms[name]:7.3f} {f'{low:.3f}-{high:.3f}':>15} "
                f"{ms[name] / floor:8.1f} {st[name]:11.1f} {commits[name]:8.1f}"
            )
        non_safe = [ms[c] for c in POLICIES if c != "safe" and c in ms]
        ms = dict(ms, **({"worst non-safe": max(non_safe)} if non_safe else {}))
        for what, num, den, limit in GOALS:
            if num not in ms or den not in ms:
                continue
            if ms[num] <= 0 or ms[den] <= 0:
                # The larger N took no longer: outside load swamped it; no ratio to claim.
                failures.append(f"{result['db']} {what} (not measured: re-run on a quiet machine)")
                print(f"  {what:<28} not measured (a marginal cost came out <= 0)")
                continue
            ratio = ms[num] / ms[den]
            ok = ratio <= limit
            failures += [] if ok else [f"{result['db']} {what}"]
            print(f"  {what:<28} {ratio:5.2f}x  goal <= {limit}x  {'ok' if ok else 'MISSED'}")
        for what, num, den in AS_WELL:
            if num in ms and ms[num] > 0 and ms[den] > 0:
                print(f"  {what:<28} {ms[num] / ms[den]:5.2f}x  (no goal)")
        what, num, den = HTTP_RATIO
        if num in ms and den in ms and ms[num] > 0 and ms[den] > 0:
            # Each round measured both cases back to back: the ratio within a round cancels
            # the load that moved the whole round, so its median is printed beside.
            pairs = zip(result["rounds"][num], result["rounds"][den], strict=True)
            per_round = sorted(a / b for a, b in pairs if a > 0 and b > 0)
            why = (
                "SQLite never waits for the disk: the same writes, so this is the noise"
                if result["db"] == "sqlite"
                else f"{ms[den] - ms[num]:.3f} ms saved per call"
            )
            print(
                f"  {what:<28} {ms[num] / ms[den]:5.2f}x  ({why}); per round: median "
                f"{statistics.median(per_round):.2f}x, {per_round[0]:.2f}-{per_round[-1]:.2f}x"
            )
        if ms["append"] > 0 and ms["floor"] > 0:
            print(f"  {'append / floor INSERT':<28} {ms['append'] / ms['floor']:5.2f}x  (no goal)")
    print(
        "\nThe goal against the peers (non-SAFE call <= LangGraph sync superstep, SAFE <= 0.6x\n"
        "of it) is measured side by side by ../shared/peers/side_by_side.sh. The append's goal\n"
        "(<= 2x a plain insert of the same row, through Django) is bench/ledger_append.py's:\n"
        "the floor here is a bare five-column row in autocommit."
    )
    print("SUMMARY: " + ("every goal met" if not failures else "missed: " + "; ".join(failures)))


def _flush_redis() -> None:
    import redis

    try:
        redis.Redis.from_url(REDIS_URL).flushdb()
    except redis.RedisError as exc:
        print(f"  (could not flush {REDIS_URL}: {exc})")


if __name__ == "__main__":
    main()
