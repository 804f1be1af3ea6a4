"""A blocking model run off the event loop, shared by every voice loop of an edge process.

The model is built once, on first use, in one of the pool's threads (a model that cannot be
built costs the first caller, not the event loop); a few threads run the calls; and the queue
is bounded: once `max_waiting` calls wait, another gets None (overload: the caller's fallback
rule decides) rather than a late answer. A model that is missing or fails raises the error
`unavailable` names ("<what> failed: ..."), so the caller can say so in-band.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Generic, TypeVar

M = TypeVar("M")
T = TypeVar("T")


class ModelThreads(Generic[M]):
    def __init__(
        self,
        load: Callable[[], M],
        unavailable: type[Exception],
        *,
        threads: int = 1,
        max_waiting: int = 8,
        what: str = "model",
    ) -> None:
        self._load = load
        self._unavailable = unavailable
        self._max_waiting = max_waiting
        self._what = what
        self._executor = ThreadPoolExecutor(threads, thread_name_prefix=what.replace(" ", "-"))
        self._model: M | None = None
        self._loading = threading.Lock()
        self._waiting = 0

    def _call(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        with self._loading:  # several threads: the model is built once
            if self._model is None:
                self._model = self._load()
        return fn(self._model, *args)

    async def run(self, fn: Callable[..., T], *args: Any) -> T | None:
        """`fn(model, *args)` in a pool thread, or None when too many calls already wait.
        Raises `unavailable` when the model cannot be built or fails."""
        if self._waiting >= self._max_waiting:
            return None
        self._waiting += 1
        try:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._executor, self._call, fn, args)
        except self._unavailable:
            raise
        except Exception as exc:
            raise self._unavailable(f"{self._what} failed: {exc}") from exc
        finally:
            self._waiting -= 1

    def warm(self) -> None:
        """Build the model now, in a pool thread, without waiting (a first call that had to
        build it would answer too late to matter); a failure is left to the first call."""
        if self._model is None:
            self._executor.submit(self._warm)

    def _warm(self) -> None:
        with contextlib.suppress(Exception):
            self._call(lambda model: None, ())

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
