"""`python -m stream_jobs.traces`: run the traces job (a faust worker)."""

from __future__ import annotations

from runtime.settings import Settings
from stream_jobs.faust_app import run_worker
from stream_jobs.traces.app import TracesJob, create_app


def main() -> None:
    settings = Settings.from_env()
    app = create_app(settings)
    TracesJob(app, settings)
    run_worker(app, settings, "traces job ready")


if __name__ == "__main__":
    main()
