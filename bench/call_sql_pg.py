"""What the durable call's two statements cost PostgreSQL alone, with no engine around them,
beside the one-INSERT floor: how much of issue 49's floor goal (a call <= 3x the floor) the
SQL leaves to the worker's Python, and what a narrow head table would buy.

    .venv/bin/python bench/call_sql_pg.py
    .venv/bin/python bench/call_sql_pg.py --rounds 9

The statements are the append path's own, built by PostgreSQLAppend.guarded_write() for an
IDEMPOTENT first attempt: the intent (fence, effect row claimed, event, head moved; its commit
waits for the disk) and the outcome (fence, event, head moved, effect settled; its commit does
not). They run on the driver's connection, prepared, each waiting for its answer, in a loop
with no Python of the engine's: the engine sends the outcome unanswered and builds the next
intent meanwhile, so a real call can overlap part of the outcome with its own work.

Variants, measured in turns in each round on one scratch database:

  * as migrated: the head (last_seq, head_hash, version) is the runs row's, locked by the
    fence and rewritten by every event;
  * narrow head: the same statements with the head in a table of its own (run_id, version,
    last_seq, head_hash, head_anchor; no checks, no other index), locked and rewritten
    instead: the candidate issue 49 names, "a head that does not rewrite the wide run row",
    without building it.

Database: BENCH_PG_DATABASE (default `resumer_callsql`) on the bench server, created and
dropped.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common

PG_DATABASE = os.environ.get("BENCH_PG_DATABASE", "resumer_callsql")
GOAL_FLOOR = 3.0
NARROW_DDL = (
    'CREATE TABLE "bench_head" ("run_id" bigint PRIMARY KEY REFERENCES "runs_run" ("id") '
    'DEFERRABLE INITIALLY DEFERRED, "version" integer NOT NULL, "last_seq" integer NOT NULL, '
    '"head_hash" varchar(64) NOT NULL, "head_anchor" varchar(64) NOT NULL)'
)
INTENT = '{"args":{"i":1},"call":"c1","policy":"IDEMPOTENT","target":"acct@bench","tool":"inc"}'
OUTCOME = (
    '{"call":"c1","cost":"0","duration_ms":0,"external_id":"2","result":{"external_id":"2"},'
    '"status":"confirmed","tool":"inc"}'
)


def narrow(sql: str) -> str:
    """The statement with the head read, locked and moved in bench_head instead of runs."""
    return (
        sql.replace('FROM "runs_run" r INNER JOIN', 'FROM "bench_head" r INNER JOIN')
        .replace('l."run_id" = r."id"', 'l."run_id" = r."run_id"')
        .replace('WHERE r."id" = %s', 'WHERE r."run_id" = %s')
        .replace('SELECT r."id",', 'SELECT r."run_id" AS "id",')
        .replace('UPDATE "runs_run" SET', 'UPDATE "bench_head" SET')
        .replace('WHERE "id" = (SELECT "id" FROM h)', 'WHERE "run_id" = (SELECT "id" FROM h)')
    )


def child(n_lo: int, n_hi: int, rounds: int) -> None:
    _common.setup_django()
    from django.db import connection

    from runs.ledger import sql as dialects
    from runs.ledger.sql.shapes import EffectClaim, EffectSettle, EventRow, Write

    sql = dialects.for_connection(connection)
    connection.ensure_connection()
    db = connection.connection
    db.autocommit = True
    db.execute(_common.FLOOR_DDL["postgresql"])
    db.execute(NARROW_DDL)

    def new_run() -> tuple[int, int, dict]:
        run, token = _common.leased_run("bench_call_sql")
        db.execute(
            'INSERT INTO "bench_head" VALUES (%s, %s, %s, %s, %s)',
            [run.pk, run.version, run.last_seq, run.head_hash, run.head_anchor],
        )
        return run.pk, token, {"seq": run.last_seq, "hash": run.head_hash, "i": 0}

    def event(run_pk: int, token: int, head: dict, type_: str, payload: str, key: str):
        seq = head["seq"] + 1
        digest = hashlib.sha256(f"{run_pk}/{seq}/{type_}".encode()).hexdigest()
        row = EventRow(run_pk, seq, "loop", type_, "{}", payload, "", "[]", key, "bench",
                       token, head["hash"], digest)  # fmt: skip
        moves = {"last_seq": seq, "head_hash": digest, "head_anchor": "a" * 64}
        return row, moves

    def statements(rewrite):
        run_pk, token, head = new_run()
        cur = db.cursor()

        def call() -> None:
            head["i"] += 1
            i = head["i"]
            key = hashlib.sha256(f"bench/{run_pk}/{i}".encode()).hexdigest()
            fields = {
                "delivery_key": key, "run_id": run_pk, "stage": "loop", "call_id": f"c{i}",
                "tool": "inc", "policy": "IDEMPOTENT", "target": "acct@bench",
                "request_hash": hashlib.sha256(str(i).encode()).hexdigest(),
                "request": {"i": i}, "status": "intent", "external_id": "", "result": None,
                "error": "", "attempts": 1, "cost": 0,
            }  # fmt: skip
            row, moves = event(run_pk, token, head, "TOOL_CALLED", INTENT, key)
            statement, values = sql.guarded_write(Write(row, moves, EffectClaim(fields)))
            effect_pk = cur.execute(rewrite(statement), values, prepare=True).fetchone()[2]
            head["seq"], head["hash"] = row.seq, row.hash
            row, moves = event(run_pk, token, head, "TOOL_RESULT", OUTCOME, key)
            settle = {"status": "confirmed", "external_id": str(i), "result": {"i": i},
                      "error": "", "cost": 0}  # fmt: skip
            write = Write(row, moves, EffectSettle(effect_pk, settle), flush=False)
            statement, values = sql.guarded_write(write)
            assert cur.execute(rewrite(statement), values, prepare=True).fetchone()[2]
            head["seq"], head["hash"] = row.seq, row.hash

        return call

    def floor() -> None:
        db.execute(_common.FLOOR_INSERT, (1, 1, "TOOL_RESULT", '{"call":"c1"}', "f" * 64))

    cases = {"as migrated": statements(str), "narrow head": statements(narrow), "floor": floor}

    def timed(fn, n: int) -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        return time.perf_counter() - t0

    for fn in cases.values():
        timed(fn, n_lo)  # warm: plans cached, pages in
    marginal: dict[str, list[float]] = {name: [] for name in cases}
    for r in range(rounds):
        order = list(cases)[r % len(cases) :] + list(cases)[: r % len(cases)]
        for name in order:
            lo, hi = timed(cases[name], n_lo), timed(cases[name], n_hi)
            marginal[name].append((hi - lo) / (n_hi - n_lo) * 1000)
    _common.emit_result(marginal)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n-lo", type=int, default=200)
    parser.add_argument("--n-hi", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.n_lo, args.n_hi, args.rounds)
        return
    with _common.scratch_database("postgres", PG_DATABASE, "resumer-callsql-") as scratch:
        if scratch is None:
            return
        url, var_dir = scratch
        result = _common.run_child(
            Path(__file__),
            ["--child", "--n-lo", str(args.n_lo), "--n-hi", str(args.n_hi),
             "--rounds", str(args.rounds)],
            _common.child_env(url, var_dir),
        )  # fmt: skip
    ms = {name: statistics.median(values) for name, values in result.items()}
    print(
        f"PostgreSQL, the call's SQL alone, marginal ms per call over N={args.n_lo}..{args.n_hi}, "
        f"median of {args.rounds} rounds (lowest-highest round)"
    )
    for name, values in result.items():
        print(f"  {name:<12} {ms[name]:.3f} ({min(values):.3f}-{max(values):.3f})")
    floor = ms["floor"]
    for name in ("as migrated", "narrow head"):
        print(f"  {name:<12} / floor  {ms[name] / floor:.2f}x")
    print(f"  narrow / as migrated  {ms['narrow head'] / ms['as migrated']:.2f}x")
    left = GOAL_FLOOR * floor - ms["as migrated"]
    print(
        f"  left for the worker's Python under the {GOAL_FLOOR:.0f}x floor goal, were nothing "
        f"of the outcome overlapped: {left:.3f} ms a call"
    )


if __name__ == "__main__":
    main()
