"""The invocation's time, shared out among the calls a run makes.

Every outside call (the payments API, SES, SQS) is bounded, and a run starts
one only while what is left of the invocation covers that bound plus a reserve
for recording its outcome. A run near its deadline stops taking work instead of
being killed by Lambda halfway through."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

RESERVE_SECONDS = 5.0  # kept back for commits, releases and the handler's report


class RunOutOfTimeError(Exception):
    """A daily job stopped taking work near its deadline with work left. What it
    committed stands; raised so that the cron guard releases the tick and
    Lambda's retry of the tick continues where this run stopped."""


class Budget:
    def __init__(self, seconds_left: Callable[[], float], reserve: float = RESERVE_SECONDS) -> None:
        self._seconds_left = seconds_left
        self._reserve = reserve

    @classmethod
    def unlimited(cls) -> Budget:
        return cls(lambda: math.inf, reserve=0.0)

    @classmethod
    def of_lambda(cls, context: Any) -> Budget:
        """The budget of a Lambda invocation (``context.get_remaining_time_in_millis``)."""
        return cls(lambda: context.get_remaining_time_in_millis() / 1000.0)

    def left(self) -> float:
        """Seconds this run may still spend on work (the reserve excluded)."""
        return self._seconds_left() - self._reserve

    def allows(self, seconds: float) -> bool:
        """Whether a call that may take ``seconds`` fits in what is left."""
        return self.left() >= seconds

    def timeout(self, cap: float, *, keep: float = 0.0, floor: float = 1.0) -> float | None:
        """The timeout for the next call: ``cap``, or what is left (after keeping
        ``keep`` seconds for later calls) if that is less; None when less than
        ``floor`` is left (do not start the call)."""
        left = self.left() - keep
        return None if left < floor else min(cap, left)
