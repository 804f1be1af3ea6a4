"""A multi-step tool conversation on the local stack with the bundled model: the client asks
for the deployment's calculator (an MCP server over stdio, run by the tools worker), the
model's call is held to the tool's schema by guided decoding, the tools worker runs it
and the answer continues with its result, then a second question builds on the first.

Real parts: Kafka, Redis, the roles in-process (edge, preprocess, assembly, inference on
vLLM CPU with the bundled SmolLM2-135M, tools worker), the MCP SDK's stdio server. Both
modes in one run, the same conversations: `auto` (the model may call; the baseline) and
`required` (the first answer of each question is a call, the continuation answers).

The set: 12 two-step conversations (3 each in English, French, Spanish and German), written
for this benchmark and never tuned on. Counted per mode: questions answered by a call, calls
of the right tool, calls with the right numbers, final answers that contain the result, the
tool hop (the calling answer's end to the continuation's first token at the client), turns'
latency.

    python -m bench.server_tools                  # vLLM CPU, the bundled model (~5 min)
    python -m bench.server_tools --engine fake    # what a tool round costs the pipeline
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import subprocess
import time
import uuid
from dataclasses import dataclass, field

from bench.bundled_vllm import start_bundled_vllm
from bench.namespace import drop_namespace
from bench.plotting import save_figure
from bench.stats import percentile
from harness.polling import eventually
from harness.stack import pipeline
from runtime.processes import REPO
from runtime.settings import Settings
from schemas.tools import AllowList
from workers.inference.engines.fake_engine import FakeEngine
from workers.tools.mcp_servers import McpServers
from workers.tools.servers import ServerSpec
from ws_edge.client import EdgeClient
from ws_edge.messages import McpTool, ResponseDelta, ResponseDone

# (first question, its tool, its numbers, its result; the follow-up, its tool, number, result)
CONVERSATIONS = [
    ("What is 17 plus 25?", "add", (17, 25), 42, "Now multiply that by 3.", "multiply", 3, 126),
    ("What is 9 times 8?", "multiply", (9, 8), 72, "Divide that by 4.", "divide", 4, 18),
    ("Please divide 120 by 6.", "divide", (120, 6), 20, "Add 15 to it.", "add", 15, 35),
    ("Combien font 14 plus 29 ?", "add", (14, 29), 43, "Multiplie par 2.", "multiply", 2, 86),
    ("Combien font 7 fois 6 ?", "multiply", (7, 6), 42, "Ajoute 100.", "add", 100, 142),
    ("Divise 90 par 9.", "divide", (90, 9), 10, "Multiplie par 5.", "multiply", 5, 50),
    ("¿Cuánto es 33 más 44?", "add", (33, 44), 77, "Multiplícalo por 2.", "multiply", 2, 154),
    ("¿Cuánto es 12 por 11?", "multiply", (12, 11), 132, "Divídelo entre 2.", "divide", 2, 66),
    ("Divide 81 entre 3.", "divide", (81, 3), 27, "Súmale 3.", "add", 3, 30),
    ("Was ist 16 plus 64?", "add", (16, 64), 80, "Teile das durch 8.", "divide", 8, 10),
    ("Was ist 5 mal 13?", "multiply", (5, 13), 65, "Addiere 35.", "add", 35, 100),
    ("Teile 144 durch 12.", "divide", (144, 12), 12, "Multipliziere mit 7.", "multiply", 7, 84),
]
CALC = McpTool(server_label="calc", allowed_tools=["add", "multiply", "divide"])


@dataclass
class Step:
    mode: str
    language: int  # the conversation's index / 3: en, fr, es, de
    second: bool
    called: bool = False
    right_tool: bool = False
    right_numbers: bool = False
    answered: bool = False  # the final answer contains the result
    echoed: bool = False  # ... only because it repeats the tool's result block
    hop_ms: float | None = None  # the calling answer's end → the continuation's first token
    turn_ms: float = 0.0
    calls: list[str] = field(default_factory=list)


def numbers_match(arguments: str, tool: str, wanted: tuple[float, ...]) -> bool:
    try:
        args = json.loads(arguments)
        got = (float(args["a"]), float(args["b"]))
    except (ValueError, KeyError, TypeError):
        return False
    wanted_f = tuple(float(w) for w in wanted)
    if len(wanted_f) == 1:  # the follow-up: its own number, with the first result
        return wanted_f[0] in got
    return got == wanted_f or (tool != "divide" and got == wanted_f[::-1])


def mentions(text: str, result: float) -> bool:
    found = {float(n) for n in re.findall(r"-?\d+(?:\.\d+)?", text.replace(",", ""))}
    return float(result) in found


async def ask(client: EdgeClient, conversation: str, text: str, mode: str) -> tuple[list, float]:
    """Every response.done of the question (the calling answer, its continuations) and the
    tool hops, with the question's latency."""
    started = time.perf_counter()
    turn_id = await client.start_turn(
        conversation, text, tools=[CALC], tool_choice=mode, max_tokens=48, temperature=0.0
    )
    dones, hops = [], []
    ended_at = None
    while True:
        async for event in client.events(turn_id, wait_s=300):
            if isinstance(event, ResponseDelta) and ended_at is not None:
                hops.append((time.perf_counter() - ended_at) * 1000)
                ended_at = None
            if isinstance(event, ResponseDone):
                dones.append(event)
        if not dones[-1].continued_by:
            break
        turn_id, ended_at = dones[-1].continued_by, time.perf_counter()
    return [dones, hops], (time.perf_counter() - started) * 1000


async def run_mode(client: EdgeClient, mode: str, progress) -> list[Step]:
    steps: list[Step] = []
    for i, (q1, tool1, nums1, res1, q2, tool2, num2, res2) in enumerate(CONVERSATIONS):
        conversation = f"bench-tools-{mode}-{i}-{uuid.uuid4().hex[:6]}"
        for second, (question, tool, numbers, result) in enumerate(
            ((q1, tool1, nums1, res1), (q2, tool2, (num2,), res2))
        ):
            (dones, hops), turn_ms = await ask(client, conversation, question, mode)
            step = Step(mode, i // 3, bool(second), turn_ms=turn_ms)
            calls = [c for d in dones for c in d.tool_calls]
            step.calls = [c.name for c in calls]
            step.called = bool(calls)
            if calls:
                step.right_tool = calls[0].name == f"calc__{tool}"
                step.right_numbers = step.right_tool and numbers_match(
                    calls[0].arguments, tool, numbers
                )
            step.answered = mentions(dones[-1].text, result)
            step.echoed = dones[-1].text.lstrip().startswith("<tool_response>")
            step.hop_ms = hops[0] if hops else None
            steps.append(step)
            progress(
                f"[{mode}] {len(steps)}/{2 * len(CONVERSATIONS)} {question!r}: "
                f"calls {step.calls} answer {dones[-1].text[:60]!r}"
            )
    return steps


def share(steps: list[Step], attr: str) -> float:
    return 100.0 * sum(bool(getattr(s, attr)) for s in steps) / max(len(steps), 1)


def report(results: dict[str, list[Step]]) -> None:
    print(
        f"\n{'mode':>9} {'called':>7} {'tool':>6} {'numbers':>8} {'answer':>7} {'echo':>6} "
        f"{'hop p50':>8} {'hop p90':>8} {'turn p50':>9} {'turn p90':>9}"
    )
    for mode, steps in results.items():
        hops = [s.hop_ms for s in steps if s.hop_ms is not None]
        turns = [s.turn_ms for s in steps]
        print(
            f"{mode:>9} {share(steps, 'called'):6.1f}% {share(steps, 'right_tool'):5.1f}% "
            f"{share(steps, 'right_numbers'):7.1f}% {share(steps, 'answered'):6.1f}% "
            f"{share(steps, 'echoed'):5.1f}% "
            f"{percentile(hops, 50) if hops else float('nan'):8.0f} "
            f"{percentile(hops, 90) if hops else float('nan'):8.0f} "
            f"{percentile(turns, 50):9.0f} {percentile(turns, 90):9.0f}"
        )
        for second in (False, True):
            part = [s for s in steps if s.second == second]
            print(
                f"{'':>9} {'follow-ups' if second else 'first questions':<16} "
                f"tool {share(part, 'right_tool'):5.1f}%  numbers "
                f"{share(part, 'right_numbers'):5.1f}%  answer {share(part, 'answered'):5.1f}%"
            )


def plot(results: dict[str, list[Step]], name: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    labels = ["called", "right_tool", "right_numbers", "answered", "echoed"]
    width = 0.38
    for k, (mode, steps) in enumerate(results.items()):
        xs = [i + (k - 0.5) * width for i in range(len(labels))]
        left.bar(xs, [share(steps, a) for a in labels], width, label=mode)
    left.set_xticks(
        range(len(labels)),
        [
            "called",
            "right\ntool",
            "right\nnumbers",
            "answer has\nthe result",
            "answer echoes\nthe result",
        ],
    )
    left.set_ylabel("% of questions")
    left.set_title(f"calculator over MCP ({title})")
    left.legend()
    hops = [s.hop_ms for steps in results.values() for s in steps if s.hop_ms is not None]
    if hops:
        right.hist(hops, bins=20)
    right.set_xlabel("tool hop (ms): calling answer's end → continuation's first token")
    right.set_ylabel("questions")
    fig.tight_layout()
    path = save_figure(fig, name)
    print(f"plot: {path}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", default="auto,required")
    parser.add_argument(
        "--engine",
        choices=["vllm", "fake"],
        default="vllm",
        help="fake: what a tool round costs the pipeline itself (its answers echo the prompt)",
    )
    args = parser.parse_args()
    await asyncio.to_thread(
        subprocess.run, [str(REPO / "infra" / "services.sh"), "start"], check=True, cwd=REPO
    )
    settings = Settings.from_env(
        namespace=f"bench-tools-{uuid.uuid4().hex[:6]}",
        edge_port=0,
        tool_allow="*=calc__*",
        safety_output_policy="off",
    )
    servers = McpServers(
        [ServerSpec("calc", ("python", "-m", "harness.mcp_servers.calculator"))],
        allow=AllowList.parse(settings.tool_allow),
    )
    await servers.start()
    engine = (
        await start_bundled_vllm() if args.engine == "vllm" else FakeEngine(token_interval_s=0.02)
    )
    results: dict[str, list[Step]] = {}
    try:
        async with pipeline(settings, engine, with_safety=False, tools=servers) as running:
            await eventually(lambda: bool(running.edge.server_tools.listed), timeout_s=30)
            async with EdgeClient.connect(running.url, running.token("bench")) as client:
                for mode in args.modes.split(","):
                    results[mode] = await run_mode(client, mode, print)
    finally:
        await engine.close()
        await servers.close()
        await drop_namespace(settings)
    print(
        f"\npython -m bench.server_tools --engine {args.engine}, "
        f"{time.strftime('%Y-%m-%d %H:%M')}, "
        f"{len(CONVERSATIONS)} two-step conversations per mode"
    )
    report(results)
    vllm = args.engine == "vllm"
    plot(
        results,
        "server_tools" if vllm else "server_tools-fake",
        "bundled SmolLM2-135M, vLLM CPU" if vllm else "fake engine: its answers echo",
    )


if __name__ == "__main__":
    asyncio.run(main())
