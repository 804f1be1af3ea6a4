"""A role process stops when the process that started it dies, however it dies.

The local stack, the benchmarks and the tests start roles as child processes in sessions of
their own (so Ctrl-C reaches the parent, which stops them in order). A parent that dies
without that order (SIGKILL, a crash, a broken pipe to `tee` at Ctrl-C) would leave them
running, holding their ports and the embedded ClickHouse engine's lock, and the next start
fails. So each child gets the read end of a pipe whose write end only its parent holds: when
the parent dies the kernel closes it, the child's read sees end-of-file, and the child sends
itself SIGTERM, which is its ordinary graceful stop. No polling, nothing per turn: one
thread blocked in `read`.
"""

from __future__ import annotations

import os
import signal
import threading

from runtime.settings import Settings

LIFELINE_ENV = "TURNSTREAM_LIFELINE_FD"


def lifeline() -> tuple[int, int]:
    """(read end for a child to inherit, write end for the parent to hold open)."""
    return os.pipe()  # both close-on-exec: only a child named in pass_fds gets the read end


def watch_parent(settings: Settings) -> None:
    """In a role process: SIGTERM to ourselves when the parent's write end closes (no-op
    when the process was not started with a lifeline)."""
    fd = settings.lifeline_fd
    if fd < 0:
        return

    def wait() -> None:
        try:
            while os.read(fd, 1):
                pass  # nothing is ever written; end-of-file is the message
        except OSError:
            return  # not a pipe we were given: nothing to watch
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=wait, name="lifeline", daemon=True).start()
