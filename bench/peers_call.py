"""The durable call beside LangGraph's durable step at equal durability, and beside the
database's floor, measured in one run on this machine.

    .venv/bin/python bench/peers_call.py                    # SQLite NORMAL and FULL, PostgreSQL
    .venv/bin/python bench/peers_call.py --rounds 7 --db sqlite

The unit is ../shared/peers/'s: Resumer's `ctx.call` of a trivial tool (`{"external_id": i +
1}`), N of them in one stage run in-process through engine.execute (no RQ time), against one
LangGraph superstep with `durability="sync"` (bench/_langgraph_step.py), each as the marginal
cost (t(N_hi) - t(N_lo)) / (N_hi - N_lo). Beside them, the floor: one plain one-row INSERT
committed in autocommit, on Resumer's database and connection, in the same round.

Setups, each a pair of long-lived child processes (one Resumer, one LangGraph) on databases of
their own:

  * SQLite, both NORMAL: `RESUMER_SQLITE_SYNCHRONOUS=NORMAL` (Resumer's default) and
    LangGraph's SqliteSaver at `PRAGMA synchronous=NORMAL`; a commit is in the WAL, not on the
    disk;
  * SQLite, both FULL: both at FULL (sqlite3's default, so LangGraph's); every commit that
    waits for the disk flushes the WAL;
  * SQLite, today's defaults: Resumer NORMAL against LangGraph FULL (the same children);
  * PostgreSQL: both on the bench server with `synchronous_commit` as it is (on);
  * PostgreSQL, every write waiting: the same with RESUMER_PG_ANSWER_LATER=0 (a call's
    outcome waits for the server's answer, as before issue 49's last change), on databases
    of their own, so what sending it unanswered buys is measured in the same run.

A round measures each setting in turn (which goes first rotates round by round): each unit at
N_lo, then each at N_hi, Resumer's call and LangGraph's step one after the other, so outside
load falls on both within seconds. The ratios printed are the medians of the rounds' own
ratios, with the lowest and highest round; the machine's load average is printed too. The goals (issue 49): an IDEMPOTENT call at most
0.7x LangGraph's step at equal durability, and at most 5x (SQLite) or 3x (PostgreSQL) the
floor. The floor under NORMAL is a write into the WAL's page cache, tens of microseconds:
the goal against it is printed for both levels, and held at FULL, where the floor commits as
the call's intent does.

LangGraph runs in a virtualenv of its own (PEERS_LANGGRAPH_VENV, default
/tmp/resumer-langgraph-venv), made with PEER_PACKAGES below when missing. Databases: SQLite
files in a temp folder; on BENCH_PG_URL's server, BENCH_PG_DATABASE (default
`resumer_peerscall`) for Resumer and the same name + `_lg` for LangGraph (+ `_wait` and
`_wait_lg` for the waiting setup), created and dropped.
Resumer's children run with DEBUG off and a chain key set, as production does.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common

BENCH = Path(__file__).resolve().parent
PG_DATABASE = os.environ.get("BENCH_PG_DATABASE", "resumer_peerscall")
# Pinned: the versions the figures in docs/benchmarks.md were measured with.
PEER_PACKAGES = (
    "langgraph==1.2.22",
    "langgraph-checkpoint-sqlite==3.1.2",
    "langgraph-checkpoint-postgres==3.2.0",
    "psycopg[binary]==3.3.9",
)
PEERS_VENV = Path(os.environ.get("PEERS_LANGGRAPH_VENV", "/tmp/resumer-langgraph-venv"))
CASES = ("idempotent", "safe", "floor")
GOAL_PEER, GOAL_FLOOR = 0.7, {"sqlite": 5.0, "postgres": 3.0}


# --- Resumer's child -------------------------------------------------------------------------


def resumer_child() -> None:
    _common.setup_django()
    from django.conf import settings
    from django.db import connection

    from runs import engine
    from runs.models import ReplayPolicy
    from runs.pipeline import Input, KeyParts, Pipeline, Stage, StageOutput, Tool, registry

    def inc(args: dict, key: str) -> dict:
        return {"external_id": str(args["i"] + 1)}

    def key(ctx, args: dict) -> KeyParts:
        return KeyParts("acct", "bench", f"{ctx.run_id}-{args['i']}", "1")

    def loop(ctx) -> StageOutput:
        n = int(ctx.inputs["n"])
        for i in range(n):
            ctx.call(f"c{i}", "inc", i=i)
        return StageOutput(outputs={"n": n})

    def pipeline(policy: ReplayPolicy) -> Pipeline:
        return Pipeline(
            name=f"bench_{policy.lower()}",
            inputs=(Input("n", current=lambda pinned: "0", versioned=False),),
            tools=(Tool("inc", policy, call=inc, key=None if policy == "SAFE" else key),),
            stages=(Stage("loop", loop, consumes=("n",), tools=("inc",)),),
        )

    pipelines = {"idempotent": pipeline(ReplayPolicy.IDEMPOTENT), "safe": pipeline("SAFE")}
    registry._pipelines = {p.name: p for p in pipelines.values()}
    settings.RESUMER_PIPELINES = []

    def stage(case: str, n: int) -> float:
        run = engine.start_run(pipelines[case].name, {"n": str(n)}, actor="bench", enqueue=False)
        t0 = time.perf_counter()
        outcome = engine.execute(run.pk, "loop", run.ticket, holder="bench")
        elapsed = time.perf_counter() - t0
        assert outcome == engine.Outcome.VERIFIED, outcome
        return elapsed

    with connection.cursor() as cursor:
        cursor.execute(_common.FLOOR_DDL[connection.vendor])

    def floor(n: int) -> float:
        # Autocommit: the statement is its own transaction, as LangGraph's commits are.
        t0 = time.perf_counter()
        for i in range(n):
            with connection.cursor() as cursor:
                cursor.execute(
                    _common.FLOOR_INSERT, (1, i, "TOOL_RESULT", '{"call":"c1"}', "f" * 64)
                )
        return time.perf_counter() - t0

    timed = {"idempotent": lambda n: stage("idempotent", n), "safe": lambda n: stage("safe", n)}
    timed["floor"] = floor
    for case in CASES:
        timed[case](200)  # warm
    said = _sqlite_level(connection) if connection.vendor == "sqlite" else {}
    _common.emit_result({"ready": True, "connection": said})
    connection.ensure_connection()
    server = getattr(connection.connection, "info", None)
    meter = CpuMeter(server.backend_pid if server is not None else None)
    for line in sys.stdin:
        case, n = line.split()
        before = meter.read()
        seconds = timed[case](int(n))
        _common.emit_result({"seconds": seconds, "cpu": meter.read() - before})


class CpuMeter:
    """CPU seconds this process and its database server's backend (PostgreSQL, by pid, on this
    machine) have used: what a unit costs the machine, which outside load moves far less than
    its wall time."""

    def __init__(self, backend_pid: int | None) -> None:
        self.stat = f"/proc/{backend_pid}/stat" if backend_pid else None
        self.tick = os.sysconf("SC_CLK_TCK")

    def read(self) -> float:
        used = time.process_time()
        if self.stat:
            with open(self.stat) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            used += (int(fields[11]) + int(fields[12])) / self.tick
        return used


def _sqlite_level(connection) -> dict:
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA synchronous")
        level = {1: "NORMAL", 2: "FULL"}.get(cursor.fetchone()[0])
        cursor.execute("PRAGMA journal_mode")
        return {"synchronous": level, "journal_mode": cursor.fetchone()[0]}


# --- the parent ------------------------------------------------------------------------------


class Child:
    """A long-lived child that answers one JSON line per command."""

    def __init__(self, name: str, command: list[str], env: dict[str, str]) -> None:
        self.name = name
        self.proc = subprocess.Popen(
            command, cwd=_common.ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        self.ready = self.answer()

    def answer(self) -> dict:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(_common.RESULT_PREFIX):
                return json.loads(line[len(_common.RESULT_PREFIX) :])
            print(f"  [{self.name}] {line}", end="", flush=True)
        raise RuntimeError(f"{self.name} exited with {self.proc.wait()}")

    def ask(self, command: str) -> dict:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.answer()

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(timeout=60)


def peers_python() -> Path:
    python = PEERS_VENV / "bin" / "python"
    if not python.exists():
        print(f"creating {PEERS_VENV} with LangGraph", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(PEERS_VENV)], check=True)
        subprocess.run([str(PEERS_VENV / "bin" / "pip"), "install", "-q", *PEER_PACKAGES],
                       check=True)  # fmt: skip
    return python


class Setup:
    """One database setting: Resumer's child and LangGraph's, measured side by side."""

    def __init__(self, name: str, resumer: Child, peer: Child) -> None:
        self.name, self.resumer, self.peer = name, resumer, peer
        # A bare INSERT under NORMAL costs a tenth of a call: ten times the rows, so that a
        # WAL checkpoint falling into one of its two timings does not swamp the difference.
        self.floor_scale = 10 if name == "sqlite NORMAL" else 1
        self.ms: dict[str, list[float]] = {case: [] for case in (*CASES, "step")}
        self.cpu: dict[str, list[float]] = {case: [] for case in (*CASES, "step")}
        self.counts: dict = {}

    def round(self, n_lo: int, n_hi: int) -> None:
        """One round: each unit at N_lo, then each at N_hi, the two engines in turn, so that
        whatever load the machine has falls on both within seconds."""
        answers: dict[str, list[dict]] = {case: [] for case in self.ms}
        for n in (n_lo, n_hi):
            for case in CASES:
                k = self.floor_scale if case == "floor" else 1
                answer = self.resumer.ask(f"{case} {n * k}")
                answers[case].append({key: value / k for key, value in answer.items()})
                if case == "idempotent":
                    self.counts = self.peer.ask(f"step {n}")
                    answers["step"].append(self.counts)
        for case, (lo, hi) in answers.items():
            self.ms[case].append((hi["seconds"] - lo["seconds"]) / (n_hi - n_lo) * 1000)
            self.cpu[case].append((hi["cpu"] - lo["cpu"]) / (n_hi - n_lo) * 1000)


def start_children(dbs: list[str], scratch: Path) -> list[Setup]:
    lg = [str(peers_python()), str(BENCH / "_langgraph_step.py")]
    setups: list[Setup] = []
    for db in dbs:
        if db == "postgres":
            wanted = [
                (name, _common.recreate_pg_database(PG_DATABASE + suffix),
                 ["--db", "postgres", "--url",
                  _common.recreate_pg_database(PG_DATABASE + suffix + "_lg")])
                for name, suffix in PG_SETUPS.items()
            ]  # fmt: skip
        else:
            wanted = [
                (f"sqlite {level}", f"sqlite:///{scratch / f'resumer-{level}.sqlite3'}",
                 ["--db", "sqlite", "--synchronous", level, "--path",
                  str(scratch / f"langgraph-{level}.sqlite3")])
                for level in ("NORMAL", "FULL")
            ]  # fmt: skip
        for name, url, lg_args in wanted:
            env = _common.child_env(url, scratch / name.replace(" ", "-"))
            env.update(RESUMER_CHAIN_KEY="bench-chain-key")
            if name.startswith("sqlite"):
                env["RESUMER_SQLITE_SYNCHRONOUS"] = name.split()[1]
            if name == "postgres waiting":
                env["RESUMER_PG_ANSWER_LATER"] = "0"
            resumer = Child(f"resumer {name}", [sys.executable, __file__, "--child"], env)
            peer_env = dict(os.environ, PYTHONUNBUFFERED="1")
            peer = Child(f"langgraph {name}", [*lg, *lg_args], peer_env)
            setups.append(Setup(name, resumer, peer))
    return setups


def ratio_line(what: str, num: list[float], den: list[float], goal: float | None) -> tuple:
    per_round = sorted(a / b for a, b in zip(num, den, strict=True) if a > 0 and b > 0)
    if not per_round:
        return f"  {what:<40} not measured (a marginal cost came out <= 0)", False
    median = statistics.median(per_round)
    ok = goal is None or median <= goal
    verdict = "" if goal is None else f"  goal <= {goal}x  {'ok' if ok else 'MISSED'}"
    rounds = f"rounds {per_round[0]:.2f}-{per_round[-1]:.2f}x"
    return f"  {what:<40} {median:5.2f}x  ({rounds}){verdict}", ok


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):6.3f} ({min(values):.3f}-{max(values):.3f})"


def said(child: Child) -> str:
    connection = child.ready.get("connection") or {}
    return f"  [{', '.join(f'{k} {v}' for k, v in connection.items())}]" if connection else ""


def print_units(setups: list[Setup]) -> None:
    print("\nms per unit, median of the rounds (lowest-highest round)")
    for setup in setups:
        cases = ", ".join(f"{case} {spread(setup.ms[case])}" for case in CASES)
        print(f"  resumer   {setup.name:<14} {cases}{said(setup.resumer)}")
        print(f"  {'':24} CPU: idempotent {spread(setup.cpu['idempotent'])}")
        counts = setup.counts
        per_step = (
            f"  ({counts['statements']:.1f} statements, {counts['commits']:.1f} commits a step)"
            if counts.get("statements")
            else ""
        )
        step = spread(setup.ms["step"])
        print(f"  langgraph {setup.name:<14} step {step}{per_step}{said(setup.peer)}")
        print(f"  {'':24} CPU: step {spread(setup.cpu['step'])}")


# (what, Resumer's setting, LangGraph's, the goals' database: None for no goal)
PAIRS = (
    ("SQLite, both NORMAL", "sqlite NORMAL", "sqlite NORMAL", "sqlite"),
    ("SQLite, both FULL", "sqlite FULL", "sqlite FULL", "sqlite"),
    ("SQLite, defaults (Resumer NORMAL, LangGraph FULL)", "sqlite NORMAL", "sqlite FULL", None),
    ("PostgreSQL", "postgres", "postgres", "postgres"),
    (
        "PostgreSQL, every write waiting for its answer",
        "postgres waiting",
        "postgres waiting",
        None,
    ),
)
# PostgreSQL's setups, by the suffix of their databases' names: as deployed, and with every
# write waiting for the server's answer (RESUMER_PG_ANSWER_LATER=0), which the outcome sent
# unanswered is measured against in the same run.
PG_SETUPS = {"postgres": "", "postgres waiting": "_wait"}


def report(setups: list[Setup]) -> list[str]:
    print_units(setups)
    missed = []
    by_name = {setup.name: setup for setup in setups}
    for what, ours, theirs, db in PAIRS:
        if ours not in by_name or theirs not in by_name:
            continue
        resumer, peer = by_name[ours].ms, by_name[theirs].ms
        print(f"\n{what}")
        goal = GOAL_PEER if db else None
        line, ok = ratio_line(
            "IDEMPOTENT call / LangGraph step", resumer["idempotent"], peer["step"], goal
        )
        print(line)
        missed += [] if ok else [f"{what}: IDEMPOTENT / LangGraph"]
        print(ratio_line("SAFE call / LangGraph step", resumer["safe"], peer["step"], None)[0])
        # The same in CPU (process + server): what outside load moves least.
        cpu_resumer, cpu_peer = by_name[ours].cpu["idempotent"], by_name[theirs].cpu["step"]
        print(ratio_line("  in CPU, IDEMPOTENT / LangGraph", cpu_resumer, cpu_peer, None)[0])
        if db is None:
            continue
        # The floor's goal is held where its commit is the one the call's intent waits for:
        # FULL on SQLite, and PostgreSQL; under NORMAL it is printed for what it says.
        goal = GOAL_FLOOR[db] if db == "postgres" or "FULL" in what else None
        line, ok = ratio_line(
            "IDEMPOTENT call / one-INSERT floor", resumer["idempotent"], resumer["floor"], goal
        )
        print(line)
        missed += [] if ok else [f"{what}: IDEMPOTENT / floor"]
    if "postgres" in by_name and "postgres waiting" in by_name:
        sent, waiting = by_name["postgres"].ms, by_name["postgres waiting"].ms
        print("\nPostgreSQL, outcomes sent unanswered / every write waiting (no goal)")
        for case in ("idempotent", "safe"):
            print(ratio_line(f"{case.upper()} call", sent[case], waiting[case], None)[0])
    return missed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--n-lo", type=int, default=200)
    parser.add_argument("--n-hi", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        resumer_child()
        return
    dbs = ["sqlite", "postgres"] if args.db == "both" else [args.db]
    print(
        f"the durable call beside LangGraph's step, marginal over N={args.n_lo}..{args.n_hi}, "
        f"{args.rounds} interleaved rounds; load average {os.getloadavg()[0]:.2f} at start"
    )
    scratch = _common.scratch_dir("resumer-peerscall-")
    setups: list[Setup] = []
    try:
        setups = start_children(dbs, scratch)
        for r in range(args.rounds):
            # The settings take turns going first, so no one of them always follows another.
            for setup in setups[r % len(setups) :] + setups[: r % len(setups)]:
                setup.round(args.n_lo, args.n_hi)
            print(f"  round {r + 1}/{args.rounds} done", flush=True)
    finally:
        for setup in setups:
            setup.resumer.stop()
            setup.peer.stop()
        if "postgres" in dbs:
            for suffix in PG_SETUPS.values():
                _common.drop_pg_database(PG_DATABASE + suffix)
                _common.drop_pg_database(PG_DATABASE + suffix + "_lg")
        shutil.rmtree(scratch, ignore_errors=True)
    missed = report(setups)
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end")
    print("SUMMARY: " + ("every goal met" if not missed else "missed: " + "; ".join(missed)))


if __name__ == "__main__":
    main()
