"""Input screening as a step of the preprocessing worker: judge a turn's text (typed and
transcribed) before it can reach an engine, publish the verdict, tell the worker whether
to go on.

The verdict goes to Kafka `safety.verdicts` (the audit log) without waiting for delivery:
the decision itself travels with the turn (`turn.enriched` or the blocked turn's
`turn.completed`), so the trace has it either way and screening adds no broker round trip.
Blacklisted users are keyed `tenant/user` (user ids are only unique within a tenant).
A turn's images were screened where they were decoded (`image_screen`); a stopped image
stops the turn here, with the text's verdict, in one record.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from aiokafka import AIOKafkaProducer

from moderation.image_screen import blocked_images
from moderation.language import detect
from moderation.nudity import LABEL as IMAGE_LABEL
from moderation.recording import verdict_event
from moderation.screen import InputScreen
from moderation.verdict import Action, Verdict, reason_for
from schemas.codec import encode
from schemas.events import ImageInput, SafetyAction, SafetyStage, Screening, TurnSubmitted

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
        producer: AIOKafkaProducer,
        verdicts_topic: str,
        checker: str,
        clock_ms: Callable[[], float],
    ) -> None:
        self.screen = screen
        self.producer = producer
        self.verdicts_topic = verdicts_topic
        self.checker = checker
        self.clock_ms = clock_ms

    async def judge(
        self, turn: TurnSubmitted, text: str, images: Sequence[ImageInput] = ()
    ) -> GateDecision:
        verdict = await self.screen.screen(
            text, user_id=blacklist_user(turn.tenant_id, turn.user_id)
        )
        verdict = with_images(verdict, images, text)
        decision = GateDecision(screening_of(verdict), verdict.reason or DEFAULT_REASON)
        if verdict.error:
            log.warning("turn %s: a screen check failed: %s", turn.turn_id, verdict.error)
        await self._record(turn, text, verdict)
        return decision

    async def _record(self, turn: TurnSubmitted, text: str, verdict: Verdict) -> None:
        event = verdict_event(
            turn,
            SafetyStage.INPUT,
            verdict,
            judged_text=text,
            checker=self.checker,
            now_ms=self.clock_ms(),
        )
        try:  # enqueue only: the decision travels with the turn anyway
            delivery = await self.producer.send(
                self.verdicts_topic, encode(event), key=turn.conversation_id.encode()
            )
        except Exception as err:  # the audit copy must never stop a turn
            log.warning("turn %s: verdict not published: %r", turn.turn_id, err)
            return
        delivery.add_done_callback(_log_lost)


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


def _log_lost(delivery) -> None:
    if not delivery.cancelled() and delivery.exception() is not None:
        log.warning("a safety verdict was not delivered: %r", delivery.exception())
