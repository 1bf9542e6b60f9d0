"""What the OpenAI Agents SDK adapter adds to an agent run: the same agent (the support agent
of examples/openai_agents_support.py) run bare by the SDK's own Runner, and as a Resumer
stage, against the same scripted model over HTTP, in one run, as a ratio.

    .venv/bin/python bench/agents_openai_agents.py               # 30 runs a side, 5 rounds
    .venv/bin/python bench/agents_openai_agents.py --runs 10 --rounds 3

Both sides run the agent on the same ticket against the demo service (gunicorn on a free port,
its own SQLite file): two model turns from the scripted model (the first asks for send_email,
whose subject needs no approval; the second answers) and one email sent to its outbox.

  * bare: Runner.run_sync(agent, ticket) with the SDK's OpenAIChatCompletionsModel on an
    AsyncOpenAI client (retries off), tracing off;
  * stage: engine.start_run + engine.execute in this process (no RQ), DEBUG off, a scratch
    SQLite database: the run created, the lease taken, STARTED, each turn and the email a
    durable call (intent, the call, outcome; the conversation stored as an artifact), the
    checkpoint, VERIFIED and SUCCEEDED, the lease released.

The sides alternate per round, so drift from outside load hits both. Prints the median time
per agent run of each side, the difference per durable call (3 a run) and the ratio.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import ROOT, bare_and_stage, child_env, demo_service, scratch_dir, setup_django

TICKET = "Please tell me when order 42 ships. Bo"
SCRIPT = [
    {
        "tool_calls": [
            {
                "name": "send_email",
                "arguments": {"to": "bo@example.com", "subject": "Order 42", "body": "Monday."},
            }
        ]
    },
    {"content": "Bo has been told order 42 ships on Monday."},
]
CALLS_PER_RUN = 3  # two model turns and the email


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    var_dir = scratch_dir("resumer-agentsbench-")
    os.environ.update(child_env(f"sqlite:///{var_dir / 'bench.sqlite3'}", var_dir))
    sys.path.insert(0, str(ROOT / "examples"))
    with demo_service(var_dir) as url:
        os.environ.update(
            DEMO_SERVICE_URL=url,
            SUPPORT_API_URL=url,
            MODEL_BASE_URL=f"{url}/v1",
            RESUMER_PIPELINES="openai_agents_support.pipeline",
            RESUMER_CALL_HOOKS="",
        )
        setup_django()
        measure(url, options.runs, options.rounds)


def measure(url: str, runs: int, rounds: int) -> None:
    from agents import OpenAIChatCompletionsModel, RunConfig, Runner
    from openai import AsyncOpenAI
    from openai_agents_support import agent

    from demo_service.process import ServiceClient
    from runs import engine
    from runs.models import Run

    model = ServiceClient(url).script("bench", SCRIPT)
    client = AsyncOpenAI(base_url=f"{url}/v1", api_key="bench", max_retries=0)
    config = RunConfig(model=OpenAIChatCompletionsModel(model, client), tracing_disabled=True)

    def bare(_: int) -> None:
        result = Runner.run_sync(agent, TICKET, run_config=config)
        assert result.final_output == SCRIPT[-1]["content"]

    def stage(_: int) -> None:
        inputs = {"model": model, "ticket": TICKET}
        run = engine.start_run("openai-agents-support", inputs, actor="bench", enqueue=False)
        engine.execute(run.pk, run.current_stage, run.ticket, holder="bench")
        assert Run.objects.get(pk=run.pk).status == Run.Status.SUCCEEDED

    bare_ms, stage_ms = bare_and_stage(bare, stage, runs=runs, rounds=rounds)
    per_call = (stage_ms - bare_ms) / CALLS_PER_RUN
    print(f"agent runs per side: {runs} x {rounds} rounds, demo service at {url}, DEBUG off")
    print(f"  bare Runner.run_sync      {bare_ms:8.2f} ms a run")
    print(f"  as a Resumer stage        {stage_ms:8.2f} ms a run  (+{per_call:.2f} ms a call)")
    print(f"  ratio stage / bare: {stage_ms / bare_ms:.2f}")


if __name__ == "__main__":
    main()
