"""What one image request becomes (pure): the diffusion prompt taken from the user's words,
the size and steps within the deployment's limits, and the seed.

Size and steps come from `turn.create.image` first, then from the text ("a 4000x3000 photo
of…", "in 8 steps"), then the defaults. Values past the limits are clamped, never refused,
and the `notice` tells the user what changed: a side above the maximum scales the image
down keeping its aspect ratio, a side below the minimum is raised, and sides are rounded
down to the pipeline's multiple (the VAE's scale factor) silently. The seed is the client's,
or derived from the turn id: a redelivered turn draws the same picture.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from schemas.events import ImageOptions

MAX_PROMPT_CHARS = 500  # CLIP reads 77 tokens; longer prompts only cost safety-check time
SEED_MASK = (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class ImageLimits:
    width: int = 512
    height: int = 512
    steps: int = 4
    min_side: int = 64
    max_side: int = 1024
    max_steps: int = 50
    multiple: int = 8  # sides are rounded down to it (the pipeline's VAE scale factor)


@dataclass(frozen=True, slots=True)
class ImageJob:
    prompt: str
    width: int
    height: int
    steps: int
    seed: int
    notice: str = ""  # what was clamped, for the user ("" when nothing was)


_REQUEST = re.compile(
    r"^\W*(?:(?:hey|hi|hello|ok(?:ay)?|so|now|please|pls)\b[\s,!.]*)*"
    r"(?:(?:can|could|would|will) you\s+(?:please\s+)?|i(?:'d| would) like you to\s+|"
    r"i want you to\s+|go ahead and\s+)?(?:please\s+)?"
    r"(?:draw|paint|sketch|illustrate|render|generate|create|make|produce|design|show)"
    r"\s+(?:me\s+|us\s+)?",
    re.IGNORECASE,
)
_SIZE = re.compile(r"\b(\d{2,6})\s*[x\u00d7]\s*(\d{2,6})\b(?:\s*(?:px|pixels?)\b)?", re.I)
_STEPS = re.compile(
    r"\b(?:in|with|using)\s+(\d{1,6})\s+(?:denoising\s+|diffusion\s+|inference\s+)?steps?\b",
    re.IGNORECASE,
)
_TRAILING = re.compile(r"[\s,;:.!?]*(?:\bplease\b)?[\s,;:.!?]*$", re.IGNORECASE)


def subject(text: str) -> str:
    """The diffusion prompt in a request: the words after the asking ("can you draw me a
    picture of a cat?" → "a picture of a cat"), without size and step counts. Diffusion
    models read "a picture of …" well, so the image noun stays."""
    text = " ".join(text.split())[: MAX_PROMPT_CHARS * 2]
    prompt = _REQUEST.sub("", text, count=1)
    prompt = _STEPS.sub("", _SIZE.sub("", prompt))
    prompt = _TRAILING.sub("", " ".join(prompt.split()))
    return (prompt or text.strip())[:MAX_PROMPT_CHARS]


def from_text(text: str) -> ImageOptions:
    """Size and steps the user wrote in words ("512x768", "in 8 steps"), if any."""
    size = _SIZE.search(text)
    steps = _STEPS.search(text)
    return ImageOptions(
        width=int(size[1]) if size else None,
        height=int(size[2]) if size else None,
        steps=int(steps[1]) if steps else None,
    )


def turn_seed(turn_id: str) -> int:
    """A seed fixed by the turn: the same turn (a redelivery, a retry) draws the same image."""
    return int.from_bytes(hashlib.sha256(turn_id.encode()).digest()[:8], "big") & SEED_MASK


def plan(text: str, options: ImageOptions | None, limits: ImageLimits, turn_id: str) -> ImageJob:
    """The job for one request: the client's options win over what the text says."""
    said = from_text(text)
    chosen = options or ImageOptions()
    width = _first(chosen.width, said.width, limits.width)
    height = _first(chosen.height, said.height, limits.height)
    steps = _first(chosen.steps, said.steps, limits.steps)
    seed = chosen.seed if chosen.seed is not None else turn_seed(turn_id)
    (width, height), size_notice = clamp_size(width, height, limits)
    steps, steps_notice = clamp_steps(steps, limits)
    notice = " ".join(n for n in (size_notice, steps_notice) if n)
    return ImageJob(subject(text), width, height, steps, seed & SEED_MASK, notice)


def clamp_size(width: int, height: int, limits: ImageLimits) -> tuple[tuple[int, int], str]:
    """The size generated for a requested one, and the notice when it had to change."""
    asked = (width, height)
    w, h = max(1, width), max(1, height)
    notices = []
    if max(w, h) > limits.max_side:
        scale = limits.max_side / max(w, h)
        w, h = max(1, round(w * scale)), max(1, round(h * scale))
        notices.append(f"the largest side is {limits.max_side} px")
    if min(w, h) < limits.min_side:
        w, h = max(w, limits.min_side), max(h, limits.min_side)
        notices.append(f"the smallest side is {limits.min_side} px")
    multiple = max(1, limits.multiple)
    w, h = _round_down(w, multiple, limits), _round_down(h, multiple, limits)
    if not notices:
        return (w, h), ""
    return (w, h), f"Asked for {asked[0]}x{asked[1]}; made {w}x{h} ({', '.join(notices)})."


def clamp_steps(steps: int, limits: ImageLimits) -> tuple[int, str]:
    if steps > limits.max_steps:
        return limits.max_steps, f"Asked for {steps} steps; ran {limits.max_steps} (the most)."
    if steps < 1:
        return 1, f"Asked for {steps} steps; ran 1."
    return steps, ""


def caption(job: ImageJob) -> str:
    """The answer's text: what was drawn (the history and the trace keep it)."""
    text = f"Here is the image you asked for: “{job.prompt}” ({job.width}x{job.height})."
    return f"{text} {job.notice}" if job.notice else text


def _first(*values: int | None) -> int:
    return next(v for v in values if v is not None)


def _round_down(side: int, multiple: int, limits: ImageLimits) -> int:
    rounded = side - side % multiple
    if rounded < limits.min_side:  # rounding must not undo the minimum
        rounded += multiple
    return max(multiple, rounded)
