"""How the bundled model calls tools: the tools described in the prompt only, against the
same prompt with the call held to the tools' schemas by guided decoding (`auto`: free text
or a well-formed call; `required`: one call, the whole answer), on real vLLM with the
bundled SmolLM2.

The set: 4 tools, 32 requests that need one (8 per tool, in English, French, Spanish and
German) and 8 that need none, written after the tools and never tuned on. Counted per mode:
answers with a call that parses, calls of the right tool, calls whose arguments are an
instance of the tool's schema, calls whose arguments are grounded (the city, amount or
query of the request appears in them), calls on requests that need none, and latency.

    python -m bench.tool_calls
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import unicodedata
import uuid
from typing import Any

import jsonschema

from bench.bundled_vllm import start_bundled_vllm
from bench.plotting import RESULTS, save_figure
from bench.stats import percentile
from schemas.events import (
    DecodingParams,
    Message,
    Role,
    ToolChoice,
    ToolChoiceMode,
    ToolSpec,
)
from schemas.tools import call_constraint, split_calls, tools_preamble
from workers.inference.engines.engine import GenerationRequest

TOOLS = [
    ToolSpec(
        "get_weather",
        "The weather now in a city",
        json.dumps(
            {
                "type": "object",
                "properties": {"city": {"type": "string", "maxLength": 40}},
                "required": ["city"],
                "additionalProperties": False,
            }
        ),
    ),
    ToolSpec(
        "convert_currency",
        "Convert an amount of money from one currency to another",
        json.dumps(
            {
                "type": "object",
                "properties": {
                    "amount": {"type": "number"},
                    "source": {"type": "string", "maxLength": 3},
                    "target": {"type": "string", "maxLength": 3},
                },
                "required": ["amount", "source", "target"],
                "additionalProperties": False,
            }
        ),
    ),
    ToolSpec(
        "set_timer",
        "Start a countdown timer",
        json.dumps(
            {
                "type": "object",
                "properties": {"minutes": {"type": "integer", "minimum": 1, "maximum": 600}},
                "required": ["minutes"],
                "additionalProperties": False,
            }
        ),
    ),
    ToolSpec(
        "search_web",
        "Search the web for recent information",
        json.dumps(
            {
                "type": "object",
                "properties": {"query": {"type": "string", "maxLength": 80}},
                "required": ["query"],
                "additionalProperties": False,
            }
        ),
    ),
]
# (request, the tool it needs, a word its arguments should hold)
NEEDS_A_TOOL: list[tuple[str, str, str]] = [
    ("What's the weather like in Lisbon right now?", "get_weather", "lisbon"),
    ("Is it raining in Seattle today?", "get_weather", "seattle"),
    ("Quel temps fait-il à Lyon ?", "get_weather", "lyon"),
    ("Fait-il froid à Québec ce matin ?", "get_weather", "québec"),
    ("¿Qué tiempo hace en Sevilla?", "get_weather", "sevilla"),
    ("¿Hace sol en Valparaíso hoy?", "get_weather", "valparaíso"),
    ("Wie ist das Wetter in Leipzig?", "get_weather", "leipzig"),
    ("Schneit es gerade in Innsbruck?", "get_weather", "innsbruck"),
    ("Convert 250 US dollars to euros.", "convert_currency", "250"),
    ("How many yen is 40 pounds?", "convert_currency", "40"),
    ("Convertis 120 euros en dollars canadiens.", "convert_currency", "120"),
    ("Combien font 75 francs suisses en euros ?", "convert_currency", "75"),
    ("Convierte 300 pesos mexicanos a dólares.", "convert_currency", "300"),
    ("¿Cuántos euros son 90 dólares?", "convert_currency", "90"),
    ("Rechne 500 Euro in Dollar um.", "convert_currency", "500"),
    ("Wie viel sind 60 Pfund in Euro?", "convert_currency", "60"),
    ("Set a timer for 15 minutes.", "set_timer", "15"),
    ("Remind me in 45 minutes, start a countdown.", "set_timer", "45"),
    ("Lance un minuteur de 10 minutes.", "set_timer", "10"),
    ("Mets un compte à rebours de 25 minutes.", "set_timer", "25"),
    ("Pon un temporizador de 5 minutos.", "set_timer", "5"),
    ("Inicia una cuenta atrás de 30 minutos.", "set_timer", "30"),
    ("Stell einen Timer auf 20 Minuten.", "set_timer", "20"),
    ("Starte einen Countdown von 8 Minuten.", "set_timer", "8"),
    ("Search the web for the latest Mars rover news.", "search_web", "mars"),
    ("Look up who won yesterday's cycling stage.", "search_web", "cycling"),
    ("Cherche sur le web les horaires du musée d'Orsay.", "search_web", "orsay"),
    ("Trouve les dernières nouvelles sur le télescope James Webb.", "search_web", "webb"),
    ("Busca en internet el precio del café hoy.", "search_web", "café"),
    ("Busca noticias recientes sobre el volcán Etna.", "search_web", "etna"),
    ("Suche im Netz nach den Öffnungszeiten des Zoos in Köln.", "search_web", "zoo"),
    ("Finde aktuelle Nachrichten über die Bahnstreiks.", "search_web", "bahnstreik"),
]
NEEDS_NONE = [
    "Tell me a short joke about cats.",
    "What is the capital of Italy?",
    "Écris un petit poème sur la mer.",
    "Dis-moi bonjour en trois langues.",
    "¿Cuál es tu color favorito?",
    "Explícame qué es una metáfora.",
    "Erzähl mir etwas über Beethoven.",
    "Was ist ein Hauptsatz?",
]
MODES = ("prompt only", "auto", "required")


def request(text: str, mode: str, max_tokens: int) -> GenerationRequest:
    constraint = None
    if mode == "auto":
        constraint = call_constraint(TOOLS, ToolChoice())
    elif mode == "required":
        constraint = call_constraint(TOOLS, ToolChoice(ToolChoiceMode.REQUIRED))
    return GenerationRequest(
        request_id=uuid.uuid4().hex,
        messages=[Message(Role.SYSTEM, tools_preamble(TOOLS)), Message(Role.USER, text)],
        decoding=DecodingParams(max_tokens=max_tokens, temperature=0.0, response_format=constraint),
    )


def judge(answer: str, mode: str, tool: str, word: str) -> dict[str, bool]:
    _, calls = split_calls(answer, "bench", whole=mode == "required")
    if not calls:
        return {"called": False, "right": False, "valid": False, "grounded": False}
    call = calls[0]
    spec = next((t for t in TOOLS if t.name == call.name), None)
    valid = False
    if spec is not None:
        try:
            jsonschema.validate(json.loads(call.arguments), json.loads(spec.parameters))
            valid = True
        except (ValueError, jsonschema.ValidationError):
            valid = False
    grounded = _fold(word) in _fold(json.loads(call.arguments).__str__()) if valid else False
    return {"called": True, "right": call.name == tool, "valid": valid, "grounded": grounded}


def _fold(text: str) -> str:
    return unicodedata.normalize("NFC", text).casefold()


async def answer(engine: Any, req: GenerationRequest) -> tuple[str, float]:
    began = time.perf_counter()
    text = ""
    async for delta in engine.stream(req):
        text += delta.text
    return text, (time.perf_counter() - began) * 1000


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    engine = await start_bundled_vllm()
    rows: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
    cases = [(t, tool, word) for t, tool, word in NEEDS_A_TOOL] + [(t, "", "") for t in NEEDS_NONE]
    try:
        await answer(engine, request("Warm up.", "auto", 4))
        for i, (text, tool, word) in enumerate(cases, 1):
            for mode in MODES:
                if mode == "required" and not tool:
                    continue  # required forces a call: nothing to learn on chit-chat
                out, ms = await answer(engine, request(text, mode, args.max_tokens))
                verdict = judge(out, mode, tool, word)
                rows[mode].append({"text": text, "tool": tool, "answer": out, "ms": ms, **verdict})
            print(
                f"[{i}/{len(cases)}] {tool or 'no tool'}: "
                + ", ".join(
                    f"{m} {'call' if rows[m][-1]['called'] else '-'}"
                    for m in MODES
                    if rows[m] and rows[m][-1]["text"] == text
                ),
                flush=True,
            )
    finally:
        await engine.close()
    return {"rows": rows, "summary": {m: summarise(rows[m]) for m in MODES}}


def summarise(rows: list[dict[str, Any]]) -> dict[str, float]:
    need = [r for r in rows if r["tool"]]
    none = [r for r in rows if not r["tool"]]

    def pct(part: list[dict[str, Any]], key: str) -> float:
        return 100 * sum(r[key] for r in part) / len(part) if part else float("nan")

    return {
        "needing": len(need),
        "called_pct": pct(need, "called"),
        "right_tool_pct": pct(need, "right"),
        "valid_args_pct": pct(need, "valid"),
        "grounded_pct": pct(need, "grounded"),
        "false_call_pct": pct(none, "called"),
        "ms_p50": percentile([r["ms"] for r in rows], 50),
        "ms_p90": percentile([r["ms"] for r in rows], 90),
    }


def plot(summary: dict[str, dict[str, float]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [
        ("called_pct", "called"),
        ("right_tool_pct", "right tool"),
        ("valid_args_pct", "valid arguments"),
        ("grounded_pct", "grounded arguments"),
    ]
    fig, ax = plt.subplots(figsize=(9, 3.6))
    width = 0.8 / len(summary)
    for j, (mode, s) in enumerate(summary.items()):
        xs = [i + j * width for i in range(len(keys))]
        ax.bar(xs, [s[k] for k, _ in keys], width, label=mode)
    ax.set_xticks([i + width for i in range(len(keys))], [label for _, label in keys])
    ax.set_ylabel("% of the 32 requests that need a tool")
    ax.set_ylim(0, 105)
    ax.legend()
    ax.set_title("SmolLM2-135M on vLLM: tools in the prompt vs calls held to their schemas")
    fig.tight_layout()
    save_figure(fig, "tool_calls")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args()
    result = asyncio.run(main_async(args))
    print(
        f"\n{'mode':<12} {'called':>7} {'right':>6} {'valid':>6} {'grounded':>9} "
        f"{'false calls':>12} {'ms p50/p90':>12}"
    )
    for mode, s in result["summary"].items():
        print(
            f"{mode:<12} {s['called_pct']:>6.1f}% {s['right_tool_pct']:>5.1f}% "
            f"{s['valid_args_pct']:>5.1f}% {s['grounded_pct']:>8.1f}% "
            f"{s['false_call_pct']:>11.1f}% {s['ms_p50']:>6.0f}/{s['ms_p90']:<6.0f}"
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "tool_calls.json").write_text(json.dumps(result, indent=2, ensure_ascii=False))
    plot(result["summary"])
    print(f"wrote {RESULTS / 'tool_calls.json'} and tool_calls.png")


if __name__ == "__main__":
    main()
