"""The flywheel's error root: evaluation inputs that cannot be read, a gate without what it
compares, a canary that cannot be judged, the stores they read not answering."""

from __future__ import annotations

from schemas.errors import TurnstreamError


class FlywheelError(TurnstreamError):
    code = "flywheel_error"


class GateInputError(FlywheelError):
    """Input the gate cannot judge (exit 2); the message says which file and why."""

    code = "gate_bad_input"
