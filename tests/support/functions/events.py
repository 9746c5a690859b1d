"""The functions' sample events (events/<function>.json), as the tests send them."""

from __future__ import annotations

import json
import uuid
from typing import Any

from tests.support import REPO_ROOT

EVENTS_DIR = REPO_ROOT / "events"


def sample_event(function: str) -> dict[str, Any]:
    """A fresh copy of ``function``'s sample event."""
    return json.loads((EVENTS_DIR / f"{function}.json").read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def scheduled_event(function: str, when: str | None = None, event_id: str | None = None) -> dict[str, Any]:
    """The EventBridge event of ``function``'s schedule, for the tick ``when``
    (the sample's own time if None), with an id of its own unless given."""
    event = sample_event(function)
    if when is not None:
        event["time"] = when
    event["id"] = event_id or str(uuid.uuid4())
    return event
