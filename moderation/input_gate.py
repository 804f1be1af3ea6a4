"""Input screening as a step of the preprocessing worker: judge a turn's text (typed and
transcribed) before it can reach an engine, tell the worker whether to go on.

The decision travels with the turn (`screening` on `turn.enriched` or on the blocked turn's
`turn.completed`), and so does the whole verdict, for the events log (`verdicts`): screening
adds no record and no broker round trip.
Blacklisted users are keyed `tenant/user` (user ids are only unique within a tenant).
A turn's images were screened where they were decoded (`image_screen`); a stopped image
stops the turn here, with the text's verdict, in one record.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from moderation.image_screen import blocked_images
from moderation.language import detect
from moderation.nudity import LABEL as IMAGE_LABEL
from moderation.recording import verdict_event
from moderation.screen import InputScreen
from moderation.verdict import Action, Verdict, reason_for
from schemas.events import (
    ImageInput,
    SafetyAction,
    SafetyStage,
    SafetyVerdict,
    Screening,
    TurnSubmitted,
)

log = logging.getLogger("turnstream.safety.input")

DEFAULT_REASON = "This message was blocked by the safety checks."
INPUT_BLOCKED = "input_blocked"
IMAGE_BLOCKED = "image_blocked"


def blacklist_user(tenant_id: str, user_id: str) -> str:
    return f"{tenant_id}/{user_id}"


def screening_of(verdict: Verdict) -> Screening:
    return Screening(
        action=SafetyAction(str(verdict.action)),
        labels=list(verdict.labels),
        elapsed_ms=round(verdict.elapsed_ms, 3),
        error=verdict.error or "",
    )


@dataclass(frozen=True, slots=True)
class GateDecision:
    screening: Screening
    reason: str  # what the user is told when blocked
    verdict: SafetyVerdict  # the events log's copy, carried by the turn's next event

    @property
    def blocked(self) -> bool:
        return self.screening.action == SafetyAction.BLOCK

    @property
    def code(self) -> str:
        """The error code of a blocked turn: its image, or its text."""
        return IMAGE_BLOCKED if IMAGE_LABEL in self.screening.labels else INPUT_BLOCKED


class InputGate:
    def __init__(
        self,
        *,
        screen: InputScreen,
        checker: str,
        clock_ms: Callable[[], float],
    ) -> None:
        self.screen = screen
        self.checker = checker
        self.clock_ms = clock_ms

    async def judge(
        self, turn: TurnSubmitted, text: str, images: Sequence[ImageInput] = ()
    ) -> GateDecision:
        verdict = await self.screen.screen(
            text, user_id=blacklist_user(turn.tenant_id, turn.user_id)
        )
        verdict = with_images(verdict, images, text)
        if verdict.error:
            log.warning("turn %s: a screen check failed: %s", turn.turn_id, verdict.error)
        recorded = verdict_event(
            turn,
            SafetyStage.INPUT,
            verdict,
            judged_text=text,
            checker=self.checker,
            now_ms=self.clock_ms(),
        )
        return GateDecision(screening_of(verdict), verdict.reason or DEFAULT_REASON, recorded)


def with_images(verdict: Verdict, images: Sequence[ImageInput], text: str) -> Verdict:
    """The text's verdict, stopped by the first stopped image when the text was not; the
    image's detector scores join the verdict's as `image.<class>`."""
    image = blocked_images([i.screening for i in images])
    if image is None or verdict.stopped:
        return verdict
    labels = (*verdict.labels, *(label for label in image.labels if label not in verdict.labels))
    errors = ",".join(e for e in (verdict.error, image.error) if e)
    return dataclasses.replace(
        verdict,
        action=Action.BLOCK,
        labels=labels,
        scores={**verdict.scores, **{f"image.{k}": v for k, v in image.scores.items()}},
        reason=reason_for(labels, detect(text)),
        elapsed_ms=verdict.elapsed_ms + image.elapsed_ms,
        error=errors or None,
    )
