"""How every turnstream faust job is configured and run (one place for the choices)."""

from __future__ import annotations

import faust
from mode.utils.objects import cached_property

from runtime.lifeline import watch_parent
from runtime.service_process import serve_process_metrics
from runtime.settings import Settings
from runtime.tracing.provider import configure as configure_tracing
from schemas.topics import TURNS_SUBMITTED
from stream_jobs import faust_transport
from stream_jobs.metrics import install_metrics


class App(faust.App):
    """faust's app whose flow control does not forget what it clears from the stream
    queues (`faust_transport.RewindingFlowControl`: fix 4 of the transport)."""

    @cached_property
    def flow_control(self) -> faust_transport.RewindingFlowControl:
        return faust_transport.RewindingFlowControl(self._rewind, loop=self.loop)

    def _rewind(self, dropped: list) -> None:
        rewind = getattr(self.consumer, "rewind", None)
        if rewind is not None:  # our transport's consumer (always, outside of tests)
            rewind(dropped)


def make_app(settings: Settings, name: str) -> faust.App:
    """A faust app for job `name` in the settings' namespace.

    Keys and values are our own bytes (`schemas.codec`); tables live in memory with their
    changelog in Kafka (rebuilt at start); faust's web server would bind 0.0.0.0:6066, so it
    is off (metrics go to our own endpoint, TURNSTREAM_METRICS_PORT); its data folder goes
    under TURNSTREAM_HOME, not the working directory.
    """
    app_id = f"{settings.namespace}.{name}" if settings.namespace else name
    scheme = faust_transport.register()
    datadir = settings.state_path / "faust" / app_id
    datadir.parent.mkdir(parents=True, exist_ok=True)  # faust creates only the last level
    app = App(
        app_id,
        # every broker (a cluster's first may be the one down), through our transport: its
        # sends survive a timed-out request (stream_jobs/faust_transport.py)
        broker=[f"{scheme}://{server}" for server in settings.kafka_bootstrap.split(",")],
        datadir=str(datadir),
        store="memory://",
        web_enabled=False,
        topic_partitions=TURNS_SUBMITTED.partitions,
        producer_acks=-1,
        # its changelog and repartition topics as many copies as ours
        topic_replication_factor=settings.kafka_replication_factor,
        consumer_auto_offset_reset="earliest",
        processing_guarantee="at_least_once",
        # a killed job's partitions move after this, not faust's default 60 s
        broker_session_timeout=settings.kafka_session_timeout_s,
        broker_heartbeat_interval=settings.kafka_session_timeout_s / 3,
        # ... and a silent broker is given up as soon (faust's default waits 90 s): its
        # fetches time out and the partitions move to their new leaders
        broker_request_timeout=settings.kafka_session_timeout_s,
        # ... and partition leaders that moved are followed as soon as ours (make_consumer)
        consumer_metadata_max_age_ms=int(settings.kafka_metadata_max_age_s * 1000),
        producer_metadata_max_age_ms=int(settings.kafka_metadata_max_age_s * 1000),
        # its sends as well: a request to a silent broker times out and is sent again (to
        # the new leader), as its batch outlives it (faust's default: 20 minutes of waiting)
        producer_request_timeout=settings.kafka_request_timeout_s,
        key_serializer="raw",
        value_serializer="raw",
    )
    install_metrics(app)
    return app


def make_worker(app: faust.App, settings: Settings, ready_line: str) -> faust.Worker:
    """The faust worker for `app`: prints `ready_line` once tables are recovered and agents
    consume. Without its terminal spinner: at a log level of WARNING or above faust hangs
    the spinner on the root logger and sets that logger to DEBUG, so every debug call of
    aiokafka and faust built a record (py-spy: ~15% of the traces job's CPU under load)."""

    class Worker(faust.Worker):
        async def on_startup_finished(self) -> None:
            await super().on_startup_finished()
            print(ready_line, flush=True)

    worker = Worker(app, loglevel=settings.log_level, quiet=True)
    worker.spinner = None
    return worker


def run_worker(app: faust.App, settings: Settings, ready_line: str) -> None:
    """Run until stopped (see `make_worker`). Tracing is set up here (the role from
    `python -m stream_jobs.<job>`): only a job's own process exports its spans."""
    configure_tracing(settings)
    serve_process_metrics(settings)
    watch_parent(settings)  # faust stops gracefully on the SIGTERM it sends
    make_worker(app, settings, ready_line).execute_from_commandline()
