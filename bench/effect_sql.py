"""What the effect row costs a non-SAFE call on SQLite, in SQL alone: the statements a SAFE and
an IDEMPOTENT first attempt send, run on the driver's cursor in a loop with no Python of the
engine around them.

    .venv/bin/python bench/effect_sql.py
    .venv/bin/python bench/effect_sql.py --rounds 3

Issue 10 asks a non-SAFE call to cost at most 1.3x a SAFE one. On SQLite a SAFE call's SQL is
two IMMEDIATE transactions (a guarded event insert and the head move, each); an IDEMPOTENT
first attempt's is the same two with the effect row in them (the claim's insert, with its
delivery key, run and status indexes, and the outcome's update). The difference printed here
is what that row costs before any hashing or JSON of the engine's: set it against 0.3x the
SAFE call of bench/tool_call.py. Variants: the schema as migrated, and with the
effect_status_idx that migration 0024 dropped (it blocked PostgreSQL's in-place update of an
outcome), to show what that index cost.

The statements are the append path's own (runs/ledger/sql/sqlite.py, SQLiteAppend), with `?` for `%s`,
against a scratch database migrated in a temp folder.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sqlite3
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common

VARIANTS = {
    "as migrated": (),
    "with effect_status_idx": (
        'CREATE INDEX "effect_status_idx" ON "runs_effect" ("status", "policy")',
    ),
}
SAFE_CALLED = '{"args":{"i":1},"call":"c1","policy":"SAFE","tool":"inc"}'
SAFE_RESULT = '{"call":"c1","cost":"0","duration_ms":0,"result":{"external_id":"2"},"tool":"inc"}'
INTENT = '{"args":{"i":1},"call":"c1","policy":"IDEMPOTENT","target":"acct@bench","tool":"inc"}'
OUTCOME = (
    '{"call":"c1","cost":"0","duration_ms":0,"external_id":"2","result":{"external_id":"2"},'
    '"status":"confirmed","tool":"inc"}'
)


def child(n_lo: int, n_hi: int, rounds: int) -> None:
    _common.setup_django()
    from django.conf import settings
    from django.db import connection

    from runs.ledger import sql as dialects

    sql = dialects.for_connection(connection)
    set_list, _ = sql.sets({"last_seq": 0, "head_hash": "", "head_anchor": ""})
    qmark = {
        name: statement.replace("%s", "?")
        for name, statement in {
            "guarded_event": sql.guarded_event,
            "guarded_claim": sql.guarded_claim,
            "insert": sql.insert,
            "settle": sql.settle,
            "update": sql.update(set_list),
        }.items()
    }
    # One run and its lease, made through the project before the file is copied: each
    # variant starts from the same head.
    run, token = _common.leased_run("bench_effect_sql")
    migrated = Path(settings.DATABASES["default"]["NAME"])
    connection.close()

    results = {}
    for variant, ddl in VARIANTS.items():
        path = migrated.with_name(f"variant-{len(results)}.sqlite3")
        shutil.copy(migrated, path)
        db = sqlite3.connect(path, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA foreign_keys=ON")
        # The triggers call these (runs/apps.py registers them on Django's connections): no
        # maintenance, and every effect write the ledger's own, as the append path's are.
        db.create_function("resumer_maintenance", 0, lambda: 0)
        db.create_function("resumer_ledger", 0, lambda: 1)
        for statement in ddl:
            db.execute(statement)
        results[variant] = measure(db, qmark, run, token, n_lo, n_hi, rounds)
        db.close()
    _common.emit_result(results)


def measure(db, q: dict[str, str], run, token: int, n_lo: int, n_hi: int, rounds: int):
    head = {"seq": run.last_seq, "hash": run.head_hash, "i": 0}
    cur = db.cursor()

    def event(type_: str, payload: str, key: str = "") -> tuple:
        seq = head["seq"] + 1
        digest = hashlib.sha256(f"{run.pk}/{seq}/{type_}".encode()).hexdigest()
        row = (run.pk, seq, "loop", type_, "{}", payload, "", "[]", key, "bench", token,
               head["hash"], digest)  # fmt: skip
        return seq, digest, row

    def guarded(row: tuple) -> None:
        assert cur.execute(q["guarded_event"], [*row, run.pk, token, head["seq"], head["hash"]])
        assert cur.fetchone() is not None

    def move(seq: int, digest: str) -> None:
        cur.execute(q["update"], [seq, digest, "a" * 64, run.pk])
        head["seq"], head["hash"] = seq, digest

    def safe_call() -> None:
        for type_, payload in (("TOOL_CALLED", SAFE_CALLED), ("TOOL_RESULT", SAFE_RESULT)):
            seq, digest, row = event(type_, payload)
            cur.execute("BEGIN IMMEDIATE")
            guarded(row)
            move(seq, digest)
            cur.execute("COMMIT")

    def idempotent_call() -> None:
        head["i"] += 1
        i = head["i"]
        key = hashlib.sha256(f"bench/{run.pk}/{i}".encode()).hexdigest()
        claim = [key, run.pk, "loop", f"c{i}", "inc", "IDEMPOTENT", "acct@bench",
                 hashlib.sha256(str(i).encode()).hexdigest(), f'{{"i":{i}}}', "intent", "",
                 None, "", 1, 0]  # fmt: skip
        seq, digest, row = event("TOOL_CALLED", INTENT, key)
        cur.execute("BEGIN IMMEDIATE")
        effect_pk = cur.execute(
            q["guarded_claim"], [*claim, run.pk, token, head["seq"], head["hash"]]
        ).fetchone()[0]
        cur.execute(q["insert"], row).fetchone()
        move(seq, digest)
        cur.execute("COMMIT")
        seq, digest, row = event("TOOL_RESULT", OUTCOME, key)
        cur.execute("BEGIN IMMEDIATE")
        guarded(row)
        move(seq, digest)
        cur.execute(
            q["settle"], ["confirmed", str(i), f'{{"external_id":"{i}"}}', "", 0, effect_pk]
        )
        cur.execute("COMMIT")

    def timed(fn, n: int) -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        return time.perf_counter() - t0

    timed(safe_call, n_lo)
    timed(idempotent_call, n_lo)
    marginal: dict[str, list[float]] = {"safe": [], "idempotent": []}
    for _ in range(rounds):
        for name, fn in (("safe", safe_call), ("idempotent", idempotent_call)):
            lo, hi = timed(fn, n_lo), timed(fn, n_hi)
            marginal[name].append((hi - lo) / (n_hi - n_lo) * 1000)
    return {name: statistics.median(values) for name, values in marginal.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n-lo", type=int, default=1000)
    parser.add_argument("--n-hi", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.n_lo, args.n_hi, args.rounds)
        return
    with _common.scratch_database("sqlite", "", "resumer-effectsql-") as (url, var_dir):
        result = _common.run_child(
            Path(__file__),
            ["--child", "--n-lo", str(args.n_lo), "--n-hi", str(args.n_hi),
             "--rounds", str(args.rounds)],
            _common.child_env(url, var_dir),
        )  # fmt: skip
    print(
        f"SQLite, SQL alone, marginal ms per call over N={args.n_lo}..{args.n_hi}, "
        f"median of {args.rounds} rounds"
    )
    print(f"  {'schema':<28} {'SAFE':>7} {'IDEMPOTENT':>11} {'difference':>11} {'ratio':>6}")
    for variant, ms in result.items():
        delta = ms["idempotent"] - ms["safe"]
        print(
            f"  {variant:<28} {ms['safe']:7.3f} {ms['idempotent']:11.3f} {delta:11.3f} "
            f"{ms['idempotent'] / ms['safe']:5.2f}x"
        )
    print(
        "The difference is what the effect row's SQL costs a non-SAFE call; issue 10's 1.3x\n"
        "goal leaves 0.3x of bench/tool_call.py's SAFE call for it and everything else."
    )


if __name__ == "__main__":
    main()
