"""How a faust job's worker is built (`stream_jobs.faust_app.make_worker`): a quiet log level
must stay quiet (faust's spinner would set the root logger to DEBUG)."""

from __future__ import annotations

import logging

import pytest

from runtime.settings import Settings
from stream_jobs.faust_app import make_app, make_worker


@pytest.mark.parametrize("level", ["WARNING", "ERROR", "INFO"])
def test_the_root_logger_keeps_the_level_asked_for(level: str, tmp_path) -> None:
    settings = Settings.from_env(log_level=level, state_dir=str(tmp_path))
    worker = make_worker(make_app(settings, "probe"), settings, "ready")
    root = logging.getLogger()
    saved = (root.level, list(root.handlers))
    root.addHandler(logging.NullHandler())  # faust touches the first handler
    try:
        root.setLevel(logging.getLevelName(level))
        worker.on_setup_root_logger(root, logging.getLevelName(level))
        assert root.level == logging.getLevelName(level)
        assert not logging.getLogger("aiokafka.consumer.fetcher").isEnabledFor(logging.DEBUG)
    finally:
        root.setLevel(saved[0])
        root.handlers[:] = saved[1]
