"""Errors of the edge (under `schemas.errors.TurnstreamError`). Each carries the stable `code`
the client sees in its `error` event.

EdgeError
├── ProtocolError           the client sent something the protocol does not accept
│   ├── MalformedMessage    not JSON / not an object            code: malformed_json
│   ├── UnknownMessageType  a `type` the protocol does not have  code: unknown_type
│   ├── InvalidMessage      wrong fields or values               code: invalid_message
│   │                       (a voice the deployment does not offer: unknown_voice)
│   │   └── UnsupportedParameter  an OpenAI request field the HTTP door does not
│   │                       implement, named            code: unsupported_parameter
│   ├── MessageTooLarge     over TURNSTREAM_MAX_MESSAGE_BYTES    code: message_too_large
│   └── MediaTooLarge       media over the per-turn / buffer limits  code: media_too_large
├── AuthError               code: unauthenticated | token_invalid | token_expired
├── ForbiddenConversation   the conversation belongs to someone else  code: forbidden_conversation
├── TooManyTurns            per-session open-turn limit             code: too_many_turns (retryable)
├── UnknownTurn             cancel/interrupt of a turn this session does not own (or that
│                           finished playing)  code: unknown_turn
│   (the voice loop's VAD model missing or failing: EdgeError code vad_unavailable)
├── TurnModelUnavailable    semantic_vad's turn model missing or failing (that pause falls
│                           back to the silence rule)  code: turn_model_unavailable
├── CommandSpotterUnavailable  the short-command spotter missing or failing (short speech
│                           over the voice falls back to the duration rule)
│                           code: command_spotter_unavailable
├── InterimTranscriberUnavailable  the Whisper model of interim transcripts missing or
│                           failing (the turn's own transcript still comes)
│                           code: interim_transcripts_unavailable
├── RateLimited             the tenant's request or token bucket is empty
│                           code: rate_limited (retryable after `retry_after_ms`)
├── Overloaded              the pools are too busy for this tier right now
│                           code: overloaded (retryable after `retry_after_ms`)
├── BrokerUnavailable       Kafka did not ack the turn; nothing was accepted
│                           code: broker_unavailable (retryable)
├── ToolsUnavailable        the deployment's tools are not listed right now (its tools
│                           worker is down or starting)  code: tools_unavailable (retryable)
└── StoreUnavailable        Redis did not answer; nothing was accepted
    │                       code: store_unavailable (retryable)
    └── RateLimitUnavailable  the rate limiter's Redis did not answer (the caller picks
                            fail-open or fail-closed)  code: store_unavailable (retryable)
"""

from __future__ import annotations

from schemas.errors import TurnstreamError


class EdgeError(TurnstreamError):
    code = "internal_error"
    retryable = False
    client_turn_id: str | None = None  # set when the error answers a `turn.create`

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code

    @property
    def message(self) -> str:
        return str(self)


class ProtocolError(EdgeError):
    code = "invalid_message"


class MalformedMessage(ProtocolError):
    code = "malformed_json"


class UnknownMessageType(ProtocolError):
    code = "unknown_type"


class InvalidMessage(ProtocolError):
    code = "invalid_message"


class UnsupportedParameter(InvalidMessage):
    """A request field the HTTP door does not implement (named, so the client knows which)."""

    code = "unsupported_parameter"

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


class MessageTooLarge(ProtocolError):
    code = "message_too_large"


class MediaTooLarge(ProtocolError):
    code = "media_too_large"


class AuthError(EdgeError):
    code = "unauthenticated"


class ForbiddenConversation(EdgeError):
    code = "forbidden_conversation"


class TooManyTurns(EdgeError):
    code = "too_many_turns"
    retryable = True


class UnknownTurn(EdgeError):
    code = "unknown_turn"


class BrokerUnavailable(EdgeError):
    code = "broker_unavailable"
    retryable = True


class StoreUnavailable(EdgeError):
    code = "store_unavailable"
    retryable = True


class ToolsUnavailable(EdgeError):
    code = "tools_unavailable"
    retryable = True


class RateLimited(EdgeError):
    """Refused by a token bucket; `reason` names it ("requests" or "tokens")."""

    code = "rate_limited"
    retryable = True

    def __init__(self, message: str, *, retry_after_ms: int, reason: str) -> None:
        super().__init__(message)
        self.retry_after_ms = retry_after_ms
        self.reason = reason


class Overloaded(EdgeError):
    """Refused by overload control: the tier's pools are past their reject threshold."""

    code = "overloaded"
    retryable = True

    def __init__(self, message: str, *, retry_after_ms: int) -> None:
        super().__init__(message)
        self.retry_after_ms = retry_after_ms


class RateLimitUnavailable(StoreUnavailable):
    """The rate limiter could not reach Redis: nothing was taken from any bucket."""


class CommandSpotterUnavailable(EdgeError):
    """The short-command spotter (Whisper base) is not installed or failed: short speech over
    the assistant's voice falls back to the duration rule."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="command_spotter_unavailable")


class InterimTranscriberUnavailable(EdgeError):
    """The Whisper model of interim transcripts is not installed or failed: the client asked
    for them, so it is told (once); each turn's own transcript still comes."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="interim_transcripts_unavailable")


class TurnModelUnavailable(EdgeError):
    """The audio turn model is not installed or failed: `semantic_vad` falls back to the
    silence rule for that pause."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="turn_model_unavailable")
