"""From our `<image_N>` placeholders to the model's own image token (pure).

The assembly job writes `<image_1>`, `<image_2>`… into the current query; the model wants
exactly one of its image tokens per attached image (vLLM expands each into the image's
feature positions). Only the last user message binds images: placeholders in older history
are text (their images are not attached any more). The model's image token typed by a user
is neutralised everywhere, so nobody can smuggle an extra image slot into a prompt.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from schemas.events import Message, Role
from workers.inference.engines.engine import EngineError

_PLACEHOLDER = re.compile(r"<image_(\d+)>")
NEUTRALISED = "[image]"


def bind_images(messages: Sequence[Message], image_count: int, image_token: str) -> list[Message]:
    cleaned = [Message(m.role, m.content.replace(image_token, NEUTRALISED)) for m in messages]
    last_user = max((i for i, m in enumerate(cleaned) if m.role == Role.USER), default=-1)
    if image_count == 0:
        return cleaned
    if last_user < 0:
        raise EngineError("images without a question", code="image_placeholder_mismatch")
    query = cleaned[last_user].content
    found = [int(n) for n in _PLACEHOLDER.findall(query)]
    if sorted(found) != list(range(1, image_count + 1)):
        raise EngineError(
            f"{image_count} images but placeholders {found} in the query",
            code="image_placeholder_mismatch",
        )
    cleaned[last_user] = Message(Role.USER, _PLACEHOLDER.sub(image_token, query))
    return cleaned
