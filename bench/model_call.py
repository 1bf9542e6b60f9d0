"""What the model tool adds to a completion: runs/tools/model.py's call against a bare SDK
call to the same local OpenAI-compatible endpoint, in one run, as a ratio.

    .venv/bin/python bench/model_call.py                 # 200 calls a side, 5 rounds
    .venv/bin/python bench/model_call.py --calls 50 --rounds 3

Both sides send the same request (the demo's draft prompt) to the demo service's
/v1/chat/completions (gunicorn on a free port, its own SQLite file), with DEBUG=0:

  * bare: openai.OpenAI(max_retries=0).chat.completions.create(...) on one client;
  * tool: the demo pipeline's model tool's call(args, key): the same SDK call through
    with_raw_response, the exchange recorded, the usage read and priced, the conversation
    stored as a content-addressed artifact (SQLite, a scratch database).

The sides alternate per round, so drift from outside load hits both. Prints the median
per-call time of each side and the ratio tool / bare. The ledger's own writes around a call
(intent, outcome) are bench/tool_call.py's business, not this one's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import child_env, demo_service, scratch_dir, setup_django

PROMPT = "\n".join(
    [
        "Title: Resumable agents: what resumable-agents teaches us",
        "Facts:",
        "1. retry repeats paid work — https://example.org/retry",
        "2. checkpoints are accepted boundaries — https://example.org/cp",
        "3. publishes need delivery keys — https://example.org/keys",
        "Write the article. Cite each fact as [n] and list the sources.",
    ]
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    var_dir = scratch_dir("resumer-modelbench-")
    env = child_env(f"sqlite:///{var_dir / 'bench.sqlite3'}", var_dir)
    os.environ.update(env)
    with demo_service(var_dir) as url:
        os.environ["DEMO_SERVICE_URL"] = url
        setup_django()
        measure(url, options.calls, options.rounds)


def measure(url: str, calls: int, rounds: int) -> None:
    import openai

    from demo.pipeline import content_pipeline
    from runs.tools.model import spec_of

    spec = spec_of(content_pipeline.tool("model"))
    args = {
        "model": "demo-writer-1",
        "messages": [{"role": "user", "content": PROMPT}],
        "temperature": 0,
    }
    bare_client = openai.OpenAI(base_url=f"{url}/v1", api_key="bench", max_retries=0)

    def bare(i: int) -> None:
        bare_client.chat.completions.create(**args)

    def tool(i: int) -> None:
        spec.call(args, f"bench-key-{i:08d}")

    per_call: dict[str, list[float]] = {"bare": [], "tool": []}
    for side in (bare, tool):  # warm both: connections, imports, the first artifact
        side(0)
    for round_ in range(rounds):
        for name, side in (("bare", bare), ("tool", tool)):
            started = time.perf_counter()
            for i in range(calls):
                side(round_ * calls + i + 1)
            per_call[name].append((time.perf_counter() - started) / calls * 1000)
    bare_ms = statistics.median(per_call["bare"])
    tool_ms = statistics.median(per_call["tool"])
    print(f"completions per side: {calls} x {rounds} rounds, demo service at {url}")
    print(f"  bare SDK call   {bare_ms:8.3f} ms")
    print(f"  model tool call {tool_ms:8.3f} ms  (+{tool_ms - bare_ms:.3f} ms)")
    print(f"  ratio tool / bare: {tool_ms / bare_ms:.2f}")


if __name__ == "__main__":
    main()
