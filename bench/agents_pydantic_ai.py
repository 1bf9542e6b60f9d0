"""What running a Pydantic AI agent as a Resumer stage costs: the same agent run bare (the
SDK's own run_sync with its own OpenAIChatModel) and as a stage (runs/integrations/pydantic_ai/
ResumerAgent inside engine.execute), against the same scripted model over HTTP, in one run,
as a ratio.

    .venv/bin/python bench/agents_pydantic_ai.py                  # 20 runs a side, 5 rounds
    .venv/bin/python bench/agents_pydantic_ai.py --runs 10 --rounds 3 --db postgres

The agent is examples/pydantic_ai_support.py's (Pydantic AI's bank support example). The
demo service (gunicorn on a free port, its own SQLite file) serves a script every run
follows: a customer_balance call, then the final answer; so each run is 2 completions and
1 tool call on both sides. With DEBUG=0:

  * bare:  support_agent.run_sync(query, deps=..., model=OpenAIChatModel("script:...") on
           the SDK's provider pointed at the demo service);
  * stage: a bank-support run started (nothing queued) and its stage executed here with
           engine.execute: the lease, STARTED, each turn a ctx.call of the model tool
           (keyed, recorded, priced, the conversation stored), the tool call through the
           ledger, the SDK's loop on a thread of its own (bridge.py), VERIFIED with its
           checkpoint and SUCCEEDED. No RQ time is counted.

The sides alternate per round, so drift from outside load hits both. Prints the median
per-run time of each side, the ratio stage / bare and the overhead per durable call (the
difference over the run's 3 calls). The scratch database is a SQLite file (or PostgreSQL
`resumer_agentsbench` on BENCH_PG_URL's server, created and dropped).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import (
    ROOT,
    bare_and_stage,
    child_env,
    demo_service,
    scratch_database,
    setup_django,
)

EXAMPLES = ROOT / "examples"
QUERY = "What is my balance?"
STEPS = [
    {"tool_calls": [{"name": "customer_balance", "arguments": {"include_pending": True}}]},
    {"tool_calls": [{"name": "final_result", "arguments": {"risk": 1, "block_card": False}}]},
]
CALLS_PER_RUN = 3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    options = parser.parse_args()
    with scratch_database(options.db, "resumer_agentsbench", "resumer-agentsbench-") as made:
        if made is None:
            return
        database_url, var_dir = made
        os.environ.update(child_env(database_url, var_dir))
        os.environ["RESUMER_PIPELINES"] = "pydantic_ai_support.pipeline"
        sys.path.insert(0, str(EXAMPLES))
        with demo_service(var_dir) as url:
            os.environ.update(SUPPORT_API_URL=url, MODEL_BASE_URL=f"{url}/v1")
            setup_django()
            measure(url, options.runs, options.rounds, options.db)


def measure(url: str, runs: int, rounds: int, db: str) -> None:
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider
    from pydantic_ai_support import DatabaseConn, SupportDependencies, support_agent

    from demo_service.process import ServiceClient
    from runs import engine
    from runs.models import Run

    model_name = ServiceClient(url).script("bench-support", STEPS)
    provider = OpenAIProvider(base_url=f"{url}/v1", api_key="bench")
    bare_model = OpenAIChatModel(model_name, provider=provider)
    deps = SupportDependencies(customer_id=123, db=DatabaseConn())

    def bare(_: int) -> None:
        support_agent.run_sync(QUERY, deps=deps, model=bare_model)

    def stage(_: int) -> None:
        run = engine.start_run(
            "bank-support", {"model": model_name, "query": QUERY}, actor="bench", enqueue=False
        )
        engine.execute(run.pk, run.current_stage, run.ticket, holder="bench:in-process")
        if Run.objects.get(pk=run.pk).status != Run.Status.SUCCEEDED:
            raise SystemExit(f"the stage of {run.public_id} did not succeed")

    bare_ms, stage_ms = bare_and_stage(bare, stage, runs=runs, rounds=rounds)
    print(f"agent runs per side: {runs} x {rounds} rounds ({db}), each 2 turns and 1 tool call")
    print(f"  bare (the SDK's run_sync)        {bare_ms:8.2f} ms")
    print(f"  as a stage (ResumerAgent)        {stage_ms:8.2f} ms  (+{stage_ms - bare_ms:.2f} ms)")
    print(f"  per durable call: +{(stage_ms - bare_ms) / CALLS_PER_RUN:.2f} ms")
    print(f"  ratio stage / bare: {stage_ms / bare_ms:.2f}")


if __name__ == "__main__":
    main()
