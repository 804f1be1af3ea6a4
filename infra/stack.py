"""`python -m infra.stack`: the whole local stack, then the terminal chat.

Starts the services (Kafka, Redis, topics, ClickHouse migrations), converts the bundled
model if needed, starts the roles (inference worker on vLLM, preprocessing worker, assembly
job, traces job, ClickHouse sink, edge) as child processes, waits until each is ready (showing
progress), then opens the chat. Ctrl-C at the prompt, or leaving the chat, stops everything
cleanly (services too, unless --keep-services). `--serve` runs the stack without the chat
until Ctrl-C. `--kafka-cluster` makes Kafka a replicated 3-broker KRaft cluster.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import time

from infra.chat import chat
from runtime.processes import (
    REPO,
    ROLES,
    Child,
    StackError,
    start_extra_edges,
    start_roles,
    stop_roles,
)
from runtime.settings import Settings
from runtime.smollm2 import default_model_dir, is_converted
from ws_edge.auth import mint_token

# The local stack's own MCP server (a calculator, read-only), every tenant allowed: a
# client asks for it with {"type": "mcp", "server_label": "calc"} (docs/tools.md)
DEV_MCP_SERVERS = (
    '[{"name": "calc", "command": ["python", "-m", "harness.mcp_servers.calculator"]}]'
)
DEV_TOOL_ALLOW = "*=calc__*"


def run_script(*args: str) -> None:
    subprocess.run([str(REPO / "infra" / args[0]), *args[1:]], check=True, cwd=REPO)


def kafka_cluster_env(settings: Settings, nodes: int = 3) -> dict[str, str]:
    """The variables of a replicated cluster on the configured broker's port and the next
    ones (node n on port P+2(n-1), its controller the next; see infra/kafka/kafka.sh):
    replication factor `nodes`, min.insync.replicas one less, idempotent producers."""
    first = settings.kafka_bootstrap.split(",")[0]
    host, port = first.rsplit(":", 1)
    servers = ",".join(f"{host}:{int(port) + 2 * i}" for i in range(nodes))
    return {
        "TURNSTREAM_KAFKA_BOOTSTRAP": servers,
        "TURNSTREAM_KAFKA_REPLICATION_FACTOR": str(nodes),
        "TURNSTREAM_KAFKA_IDEMPOTENT": "true",
    }


def prepare(settings: Settings, engine: str) -> None:
    """Steps 1-2: services up, bundled model converted (both idempotent)."""
    print("[1/6] local services", file=sys.stderr)
    run_script("services.sh", "start")
    if engine in ("vllm", "transformers") and not settings.model_path:
        print("[2/6] bundled model", file=sys.stderr)
        if not is_converted(default_model_dir(settings)):
            subprocess.run([sys.executable, "-m", "runtime.smollm2"], check=True, cwd=REPO)
        else:
            print(f"  ✓ {default_model_dir(settings)}", file=sys.stderr)


def main() -> None:
    settings = Settings.from_env()
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--engine", default=settings.engine, choices=["vllm", "transformers", "fake"]
    )
    parser.add_argument("--serve", action="store_true", help="no chat; serve until Ctrl-C")
    parser.add_argument("--keep-services", action="store_true")
    parser.add_argument(
        "--edges",
        type=int,
        default=1,
        help="edge nodes, on consecutive ports from TURNSTREAM_EDGE_PORT (a client may "
        "resume its answers on any of them)",
    )
    parser.add_argument(
        "--kafka-cluster",
        action="store_true",
        help="a replicated 3-broker KRaft cluster (replication factor 3, min.insync.replicas "
        "2, idempotent producers) instead of one broker; its state is kept apart",
    )
    args = parser.parse_args()
    if args.kafka_cluster:  # the scripts and every role read these from the environment
        os.environ.update(kafka_cluster_env(settings))
        settings = Settings.from_env()

    logs = settings.state_path / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "TURNSTREAM_ENGINE": args.engine, "PYTHONUNBUFFERED": "1"}
    env.setdefault("TURNSTREAM_MCP_SERVERS", DEV_MCP_SERVERS)  # a deployment lists its own
    env.setdefault("TURNSTREAM_TOOL_ALLOW", DEV_TOOL_ALLOW)
    prepare(settings, args.engine)
    children: list[Child] = []
    signal.signal(signal.SIGTERM, _raise_interrupt)
    exit_code = 0
    try:
        children = start_roles(env, logs, first_step=3, steps=2 + len(ROLES))
        children += start_extra_edges(env, logs, settings, args.edges)
        print(f"logs: {logs}", file=sys.stderr)
        url = f"ws://{settings.edge_host}:{settings.edge_port}/"
        if args.serve:
            web_token = mint_token(settings.auth_secret, os.environ.get("USER", "you"), "local")
            for i in range(max(args.edges, 1)):
                port = settings.edge_port + i
                print(f"edge {i + 1}: ws://{settings.edge_host}:{port}/", file=sys.stderr)
            print(
                f"web client: http://{settings.edge_host}:{settings.edge_port}/?token={web_token}",
                file=sys.stderr,
            )
            print(f"serving on {url} (Ctrl-C stops)", file=sys.stderr)
            while True:
                time.sleep(3600)
        else:
            token = mint_token(settings.auth_secret, os.environ.get("USER", "you"), "local")
            asyncio.run(chat(url, token, settings.state_path / "speech"))
    except KeyboardInterrupt:
        pass
    except StackError as err:
        print(f"\nerror: {err}", file=sys.stderr)
        exit_code = 1
    finally:
        print("\nstopping...", file=sys.stderr)
        stop_roles(children)
        if not args.keep_services:
            run_script("services.sh", "stop")
    sys.exit(exit_code)


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    main()
