"""What every part of the connection benchmark shares: its log, tenant, stamp format and progress
line."""

from __future__ import annotations

import logging
import re
import sys

log = logging.getLogger("bench.connections")

TENANT = "bench"
DIRECT_EDGE = "bench-direct"  # the direct baseline's channel is this "edge"'s
STAMP = re.compile(r"(\d+)@(\d+\.\d)")


def progress(text: str) -> None:
    print(f"  {text}", file=sys.stderr, flush=True)
