"""What running a LangGraph agent as a Resumer stage costs: the LangGraph docs' customer
support agent (examples/langgraph_support.py) run bare by LangGraph against the scripted model
over HTTP, and the same graph as a Resumer stage, in one run, as a ratio.

    .venv/bin/python bench/agents_langgraph.py                 # 20 runs a side, 5 rounds
    .venv/bin/python bench/agents_langgraph.py --runs 10 --rounds 3

Both sides run the same graph, on the same bug report, against one demo service (gunicorn on
a free port, its own SQLite file): two completions of its scripted model
(/v1/chat/completions), a bug filed and a reply sent to its mail (/v1/mail), and the review's
interrupt answered. Production settings (DEBUG=0), a scratch SQLite database:

  * bare: the graph compiled with LangGraph's InMemorySaver, its chat model the SDK's own
    ChatOpenAI (openai, retries off) on the same endpoint, its tools called as written;
    invoke() to the interrupt, then invoke(Command(resume=answer));
  * stage: GraphAgent in a stage executed in this process (engine.execute, the lease, the
    ledger): the stage runs to the gate and stops, the answer is recorded
    (gates.answers.answer), and the stage runs again, replaying its two turns and the bug
    from the ledger, to send the reply and verify.

The sides alternate per round, so drift from outside load hits both. Prints the median time
per agent run of each side and the ratio stage / bare.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import ROOT, bare_and_stage, child_env, demo_service, scratch_dir, setup_django

CLASSIFIED = {"intent": "bug", "urgency": "high", "topic": "PDF export", "summary": "PDF crash"}
SCRIPT = [
    [{"json": CLASSIFIED}],
    [{"content": "Sorry about the crash: we filed it and will write when it is fixed."}],
]
EMAIL = {
    "email_content": "The export feature crashes when I select PDF format.",
    "sender_email": "customer@example.com",
    "email_id": "email_123",
}
ANSWER = {"approved": True, "edited_response": "Sorry about the PDF crash: bug filed."}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    var_dir = scratch_dir("resumer-langgraphbench-")
    os.environ.update(child_env(f"sqlite:///{var_dir / 'bench.sqlite3'}", var_dir))
    os.environ.update(
        RESUMER_PIPELINES="langgraph_support.pipeline", RESUMER_FAULTS="0", RESUMER_CALL_HOOKS=""
    )
    sys.path.insert(0, str(ROOT / "examples"))
    with demo_service(var_dir) as url:
        os.environ.update(DEMO_SERVICE_URL=url, SUPPORT_API_URL=url, MODEL_BASE_URL=f"{url}/v1")
        setup_django()
        measure(url, options.runs, options.rounds)


def measure(url: str, runs: int, rounds: int) -> None:
    import langgraph_support
    from langchain_openai import ChatOpenAI
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command

    from demo_service.process import ServiceClient
    from runs import engine, enqueue
    from runs.gates import answers
    from runs.models import Gate, GateStatus, Run

    # A script per agent run (the model's conversations are known by their openings, and the
    # draft's holds the bug's id, new each run), registered before anything is timed.
    service = ServiceClient(url)
    models = {
        (side, i): service._control(
            "POST", "/v1/scripts", json={"name": f"{side}-{i}", "conversations": SCRIPT}
        )["model"]
        for side in ("bare", "stage")
        for i in range(runs * rounds + 1)
    }
    resumer_llm = langgraph_support.llm
    bare_llms = {
        i: ChatOpenAI(model=models["bare", i], base_url=f"{url}/v1", api_key="b", max_retries=0)
        for i in range(runs * rounds + 1)
    }

    def bare(i: int) -> None:
        langgraph_support.llm = bare_llms[i]
        app = langgraph_support.workflow.compile(checkpointer=InMemorySaver())
        config = {"configurable": {"thread_id": f"bare-{i}"}}
        app.invoke({**EMAIL, "messages": []}, config)
        final = app.invoke(Command(resume=ANSWER), config)
        assert final["draft_response"] == ANSWER["edited_response"], final

    def stage(i: int) -> None:
        langgraph_support.llm = resumer_llm
        inputs = {"model": models["stage", i], **EMAIL}
        run = engine.start_run("langgraph-support", inputs, actor="bench")
        run = execute(run)
        assert run.status == Run.Status.WAITING, run.status
        gate = Gate.objects.get(run=run, status=GateStatus.OPEN)
        answers.answer(gate.pk, ANSWER, actor="user:bench", roles=frozenset({"operator"}))
        run = execute(run)
        assert run.status == Run.Status.SUCCEEDED, run.status

    def execute(run: Run) -> Run:
        run.refresh_from_db()
        engine.execute(run.pk, run.current_stage, run.ticket, holder="bench")
        run.refresh_from_db()
        return run

    # This process executes every stage itself: nothing is put on a queue.
    with mock.patch.object(enqueue, "dispatch", lambda *args, **kwargs: True):
        bare_ms, stage_ms = bare_and_stage(bare, stage, runs=runs, rounds=rounds)
    print(f"agent runs per side: {runs} x {rounds} rounds, demo service at {url}")
    print("  each: 2 completions, a bug filed and a reply sent by mail, a review answered")
    print(f"  bare LangGraph (ChatOpenAI)  {bare_ms:8.1f} ms")
    print(f"  as a Resumer stage           {stage_ms:8.1f} ms  (+{stage_ms - bare_ms:.1f} ms)")
    print(f"  ratio stage / bare: {stage_ms / bare_ms:.2f}")


if __name__ == "__main__":
    main()
