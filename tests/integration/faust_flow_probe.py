"""`python -m tests.integration.faust_flow_probe TOPIC TOTAL RESUME_AFTER OUT`: a faust app
of ours (`stream_jobs.faust_app`) reads TOPIC, and after RESUME_AFTER records resumes its
flow control, as faust does when a recovery ends (which empties the stream queues). Every
offset its agent processes is appended to the file OUT; it exits once TOTAL distinct
offsets were processed, or after `GIVE_UP_S`."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from runtime.settings import Settings
from stream_jobs.faust_app import make_app, make_worker

GIVE_UP_S = 40.0


def main() -> None:
    topic_name, total, resume_after, out = sys.argv[1:5]
    settings = Settings.from_env()
    app = make_app(settings, f"flowprobe-{topic_name}")
    seen: set[int] = set()
    with Path(out).open("a", buffering=1) as processed:  # line-buffered: each as it comes

        async def probe(stream) -> None:
            async for event in stream.events():
                offset = event.message.offset
                processed.write(f"{offset}\n")
                seen.add(offset)
                if len(seen) == int(resume_after):
                    app.flow_control.resume()  # what the end of a recovery does
                if len(seen) >= int(total):
                    os._exit(0)
                await asyncio.sleep(0.05)  # the rest of the batch waits in the stream's queue

        async def give_up() -> None:
            await asyncio.sleep(GIVE_UP_S)
            os._exit(3)

        app.agent(app.topic(topic_name), name="probe")(probe)
        app.task(give_up)
        make_worker(app, settings, "probe ready").execute_from_commandline()


if __name__ == "__main__":
    main()
