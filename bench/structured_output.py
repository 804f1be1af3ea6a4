"""How often the bundled model's answers hold a JSON Schema: asked in the prompt only (the
best a client can do without guided decoding) against the same prompt with
`response_format` (vLLM's guided decoding), on real vLLM with the bundled SmolLM2.

The set: 8 schemas of the kinds applications ask for (flat records, enums, arrays, nested
objects, numbers with bounds), each with questions in English, French, Spanish and German
that the schemas were not tuned on (the schemas were written first, then the questions; the
engine sees each question once per mode). Both modes run in one process on one engine,
alternating per question, so they share its warm state. Counted per mode: answers that
parse as JSON, answers that are instances of the schema, output tokens, latency.

    python -m bench.structured_output            # 8 schemas x 4 languages x 2 modes
    python -m bench.structured_output --max-tokens 96 --repeat 2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from typing import Any

import jsonschema

from bench.bundled_vllm import start_bundled_vllm
from bench.plotting import RESULTS, save_figure
from bench.stats import percentile
from schemas.events import DecodingParams, Message, OutputFormat, ResponseFormat, Role
from workers.inference.engines.engine import GenerationRequest

S = {"type": "string", "maxLength": 40}
SCHEMAS: dict[str, dict[str, Any]] = {
    "city": {
        "type": "object",
        "properties": {"city": S, "country": S, "population": {"type": "integer"}},
        "required": ["city", "country", "population"],
        "additionalProperties": False,
    },
    "sentiment": {
        "type": "object",
        "properties": {
            "sentiment": {"enum": ["positive", "negative", "neutral"]},
            "confidence": {"type": "number", "minimum": 0, "maximum": 1},
        },
        "required": ["sentiment", "confidence"],
        "additionalProperties": False,
    },
    "todo": {
        "type": "object",
        "properties": {"items": {"type": "array", "items": S, "minItems": 1, "maxItems": 5}},
        "required": ["items"],
        "additionalProperties": False,
    },
    "person": {
        "type": "object",
        "properties": {
            "name": S,
            "age": {"type": "integer", "minimum": 0, "maximum": 130},
            "email": S,
        },
        "required": ["name", "age", "email"],
        "additionalProperties": False,
    },
    "weather": {
        "type": "object",
        "properties": {
            "city": S,
            "celsius": {"type": "number"},
            "sky": {"enum": ["clear", "cloudy", "rain", "snow"]},
        },
        "required": ["city", "celsius", "sky"],
        "additionalProperties": False,
    },
    "order": {
        "type": "object",
        "properties": {
            "product": S,
            "quantity": {"type": "integer", "minimum": 1},
            "address": {
                "type": "object",
                "properties": {"street": S, "city": S},
                "required": ["street", "city"],
                "additionalProperties": False,
            },
        },
        "required": ["product", "quantity", "address"],
        "additionalProperties": False,
    },
    "yes_no": {
        "type": "object",
        "properties": {"answer": {"type": "boolean"}, "reason": S},
        "required": ["answer", "reason"],
        "additionalProperties": False,
    },
    "recipe": {
        "type": "object",
        "properties": {
            "dish": S,
            "ingredients": {"type": "array", "items": S, "minItems": 2, "maxItems": 6},
            "minutes": {"type": "integer"},
        },
        "required": ["dish", "ingredients", "minutes"],
        "additionalProperties": False,
    },
}
QUESTIONS: dict[str, list[str]] = {
    "city": [
        "Tell me about the largest city in Japan.",
        "Parle-moi de la capitale de l'Italie.",
        "Háblame de la ciudad más grande de México.",
        "Erzähl mir von der Hauptstadt Deutschlands.",
    ],
    "sentiment": [
        "Classify: 'The delivery was late and the box was crushed.'",
        "Classe ce commentaire : « Service impeccable, je reviendrai ! »",
        "Clasifica: 'La película estuvo bien, nada especial.'",
        "Bewerte: 'Das Essen war kalt und teuer.'",
    ],
    "todo": [
        "Make a short list of things to pack for a beach trip.",
        "Fais une liste de courses pour une soupe de légumes.",
        "Haz una lista de tareas para limpiar la cocina.",
        "Erstelle eine Liste für den Umzug in eine neue Wohnung.",
    ],
    "person": [
        "Invent a customer record for a retired teacher.",
        "Invente une fiche client pour une étudiante en médecine.",
        "Inventa un registro de cliente para un panadero.",
        "Erfinde einen Kundendatensatz für einen jungen Piloten.",
    ],
    "weather": [
        "Describe a typical winter day in Oslo.",
        "Décris une journée d'été typique à Marseille.",
        "Describe un día de lluvia en Bogotá.",
        "Beschreibe einen Herbsttag in Hamburg.",
    ],
    "order": [
        "Write an order for three blue mugs to be sent to Baker Street in London.",
        "Écris une commande de deux lampes à livrer rue de Rivoli à Paris.",
        "Escribe un pedido de cinco libros para la calle Mayor de Madrid.",
        "Schreibe eine Bestellung über ein Fahrrad an die Königstraße in Stuttgart.",
    ],
    "yes_no": [
        "Is the Pacific the largest ocean?",
        "Le soleil est-il une planète ?",
        "¿El agua hierve a 100 grados al nivel del mar?",
        "Ist Berlin die Hauptstadt von Österreich?",
    ],
    "recipe": [
        "Give me a quick pancake recipe.",
        "Donne-moi une recette rapide d'omelette.",
        "Dame una receta sencilla de guacamole.",
        "Gib mir ein einfaches Rezept für Kartoffelsalat.",
    ],
}
MODES = ("prompt only", "response_format")


def request(name: str, question: str, enforced: bool, max_tokens: int) -> GenerationRequest:
    schema = SCHEMAS[name]
    text = (
        f"{question}\nAnswer only with a JSON object matching this JSON Schema:\n"
        f"{json.dumps(schema)}"
    )
    fmt = ResponseFormat(type=OutputFormat.JSON_SCHEMA, schema=json.dumps(schema), name=name)
    return GenerationRequest(
        request_id=uuid.uuid4().hex,
        messages=[Message(Role.USER, text)],
        decoding=DecodingParams(
            max_tokens=max_tokens, temperature=0.0, response_format=fmt if enforced else None
        ),
    )


def judge(text: str, schema: dict[str, Any]) -> tuple[bool, bool]:
    """(parses as JSON, is an instance of the schema); a prompt-only answer often wraps its
    JSON in prose or a code fence, so the outermost {...} is tried too, in its favour."""
    for candidate in (text, text[text.find("{") : text.rfind("}") + 1]):
        try:
            value = json.loads(candidate)
        except ValueError:
            continue
        try:
            jsonschema.validate(value, schema)
        except jsonschema.ValidationError:
            return True, False
        return True, True
    return False, False


async def answer(engine: Any, req: GenerationRequest) -> tuple[str, int, float, str]:
    began = time.perf_counter()
    text, tokens, reason = "", 0, ""
    async for delta in engine.stream(req):
        text += delta.text
        tokens += delta.new_tokens
        reason = delta.finish_reason or reason
    return text, tokens, (time.perf_counter() - began) * 1000, str(reason)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    engine = await start_bundled_vllm()
    rows: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    cases = [(n, q) for n, qs in QUESTIONS.items() for q in qs] * args.repeat
    try:
        await answer(engine, request("yes_no", "Warm up.", True, 8))
        for i, (name, question) in enumerate(cases, 1):
            for mode in MODES if i % 2 else reversed(MODES):  # alternate which goes first
                req = request(name, question, mode == MODES[1], args.max_tokens)
                text, tokens, ms, reason = await answer(engine, req)
                parsed, valid = judge(text, SCHEMAS[name])
                rows[mode].append(
                    {
                        "schema": name,
                        "question": question,
                        "text": text,
                        "tokens": tokens,
                        "ms": ms,
                        "finish": reason,
                        "json": parsed,
                        "valid": valid,
                    }
                )
            print(
                f"[{i}/{len(cases)}] {name}: "
                + ", ".join(f"{m} {'valid' if rows[m][-1]['valid'] else 'INVALID'}" for m in MODES),
                flush=True,
            )
    finally:
        await engine.close()
    return {"rows": rows, "summary": {mode: summarise(rows[mode]) for mode in MODES}}


def summarise(rows: list[dict[str, Any]]) -> dict[str, float]:
    n = len(rows)
    ms = [r["ms"] for r in rows]
    tokens = [r["tokens"] for r in rows]
    return {
        "answers": n,
        "json_pct": 100 * sum(r["json"] for r in rows) / n,
        "valid_pct": 100 * sum(r["valid"] for r in rows) / n,
        "cut_by_length_pct": 100 * sum(r["finish"] == "length" for r in rows) / n,
        "tokens_p50": percentile(tokens, 50),
        "tokens_p90": percentile(tokens, 90),
        "ms_p50": percentile(ms, 50),
        "ms_p90": percentile(ms, 90),
    }


def plot(summary: dict[str, dict[str, float]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6))
    modes = list(summary)
    x = range(len(modes))
    left.bar([i - 0.2 for i in x], [summary[m]["json_pct"] for m in modes], 0.4, label="JSON")
    left.bar(
        [i + 0.2 for i in x], [summary[m]["valid_pct"] for m in modes], 0.4, label="schema-valid"
    )
    left.set_xticks(list(x), modes)
    left.set_ylabel("% of answers")
    left.set_ylim(0, 105)
    left.legend()
    right.bar(x, [summary[m]["tokens_p50"] for m in modes], 0.5)
    right.set_xticks(list(x), modes)
    right.set_ylabel("output tokens, p50")
    fig.suptitle("SmolLM2-135M on vLLM: a JSON Schema in the prompt vs enforced")
    fig.tight_layout()
    save_figure(fig, "structured_output")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--repeat", type=int, default=1, help="passes over the set")
    args = parser.parse_args()
    result = asyncio.run(main_async(args))
    summary = result["summary"]
    print(
        f"\n{'mode':<16} {'answers':>7} {'JSON %':>7} {'valid %':>8} {'cut %':>6} "
        f"{'tokens p50/p90':>15} {'ms p50/p90':>13}"
    )
    for mode, s in summary.items():
        print(
            f"{mode:<16} {s['answers']:>7} {s['json_pct']:>7.1f} {s['valid_pct']:>8.1f} "
            f"{s['cut_by_length_pct']:>6.1f} {s['tokens_p50']:>7.0f}/{s['tokens_p90']:<7.0f} "
            f"{s['ms_p50']:>6.0f}/{s['ms_p90']:<6.0f}"
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "structured_output.json").write_text(json.dumps(result, indent=2))
    plot(summary)
    print(f"wrote {RESULTS / 'structured_output.json'} and structured_output.png")


if __name__ == "__main__":
    main()
