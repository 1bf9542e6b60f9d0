"""LangGraph's durable step, for bench/peers_call.py: a child process run under the peers'
virtualenv (it imports LangGraph, never Resumer or Django), answering each line `step N` it
reads on its standard input with the seconds N supersteps took (and the statements and
commits each made, on SQLite).

The unit is ../shared/peers/overhead_langgraph.py's: one node `step` doing
`{"i": state["i"] + 1}` with a conditional edge back to itself until i == N, run with
`durability="sync"` (each superstep's checkpoint written before the next starts), so the
graph runs N supersteps and writes one checkpoint (and its put_writes) per step. The parent
takes the marginal cost of a step, (t(N_hi) - t(N_lo)) / (N_hi - N_lo), as of Resumer's call.

    python _langgraph_step.py --db sqlite --synchronous FULL --path /tmp/x/lg.sqlite3
    python _langgraph_step.py --db postgres --url postgresql://postgres@127.0.0.1/db

SQLite: LangGraph's SqliteSaver on a connection of its own in WAL mode (its setup() sets it),
at `PRAGMA synchronous` NORMAL or FULL (FULL is what sqlite3 gives a new connection, so it is
LangGraph's default). Statements and commits per step are counted with sqlite3's trace hook.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import time
import uuid
from typing import TypedDict

from langgraph.graph import END, START, StateGraph

RESULT_PREFIX = "RESULT "


class State(TypedDict):
    i: int
    n: int


def step(state: State) -> dict:
    return {"i": state["i"] + 1}


def route(state: State) -> str:
    return "step" if state["i"] < state["n"] else END


def graph(saver):
    builder = StateGraph(State)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_conditional_edges("step", route, ["step", END])
    return builder.compile(checkpointer=saver)


def saver_for(args) -> tuple[object, dict, dict]:
    """The checkpointer, what its connection says of itself, and the statement counts."""
    counts = {"statements": 0, "commits": 0}
    if args.db == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = sqlite3.connect(args.path, check_same_thread=False)

        def trace(sql: str) -> None:
            counts["statements"] += 1
            counts["commits"] += sql.lstrip().upper().startswith("COMMIT")

        saver = SqliteSaver(conn)
        saver.setup()
        conn.execute(f"PRAGMA synchronous={args.synchronous}")
        said = {
            "journal_mode": conn.execute("PRAGMA journal_mode").fetchone()[0],
            "synchronous": {1: "NORMAL", 2: "FULL"}.get(
                conn.execute("PRAGMA synchronous").fetchone()[0]
            ),
        }
        conn.set_trace_callback(trace)
        return saver, said, counts
    from langgraph.checkpoint.postgres import PostgresSaver

    manager = PostgresSaver.from_conn_string(args.url)
    saver = manager.__enter__()
    saver.setup()
    # The manager owns the connection: kept for the process's life, or it closes it.
    saver._bench_manager = manager
    return saver, {}, counts


def cpu_used(backend_pid: int | None) -> float:
    """CPU seconds of this process (its saver's threads too) and of its PostgreSQL backend."""
    used = time.process_time()
    if backend_pid:
        with open(f"/proc/{backend_pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        used += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return used


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", choices=("sqlite", "postgres"), required=True)
    parser.add_argument("--synchronous", choices=("NORMAL", "FULL"), default="FULL")
    parser.add_argument("--path", default="")
    parser.add_argument("--url", default="")
    args = parser.parse_args()
    saver, said, counts = saver_for(args)
    durable = graph(saver)

    def timed(n: int) -> float:
        config = {"recursion_limit": n + 10, "configurable": {"thread_id": str(uuid.uuid4())}}
        t0 = time.perf_counter()
        out = durable.invoke({"i": 0, "n": n}, config, durability="sync")
        elapsed = time.perf_counter() - t0
        assert out["i"] == n, out
        return elapsed

    timed(20)  # warm: imports, the saver's statements
    timed(200)
    print(RESULT_PREFIX + json.dumps({"ready": True, "connection": said}), flush=True)
    conn = getattr(saver, "conn", None)
    backend = conn.info.backend_pid if args.db == "postgres" and conn is not None else None
    for line in sys.stdin:
        _, n = line.split()
        before = dict(counts)
        cpu = cpu_used(backend)
        seconds = timed(int(n))
        steps = int(n)
        result = {
            "seconds": seconds,
            "cpu": cpu_used(backend) - cpu,
            "statements": (counts["statements"] - before["statements"]) / steps,
            "commits": (counts["commits"] - before["commits"]) / steps,
        }
        print(RESULT_PREFIX + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
