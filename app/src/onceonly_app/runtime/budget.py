"""The one deadline mechanism of every function: the time a run (a Lambda
invocation, or one webhook attempt) has left, shared out among its calls.

Every outside call (an endpoint's POST, the payments API, SES, SQS) is bounded,
and a run starts one only while what is left covers that bound plus a reserve
for recording its outcome. A run near its deadline stops taking work instead of
being killed by Lambda halfway through."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

RESERVE_SECONDS = 5.0  # kept back for commits, releases and the handler's report


class RunOutOfTimeError(Exception):
    """A daily job stopped taking work near its deadline with work left. What it
    committed stands; raised so that the cron guard releases the tick and
    Lambda's retry of the tick continues where this run stopped."""


class DeadlineExceededError(TimeoutError):
    """The deadline passed before the call finished."""


class Budget:
    """Seconds left (``seconds_left()``), less a ``reserve`` kept back."""

    def __init__(self, seconds_left: Callable[[], float], reserve: float = RESERVE_SECONDS) -> None:
        self._seconds_left = seconds_left
        self._reserve = reserve

    @classmethod
    def unlimited(cls) -> Budget:
        return cls(lambda: math.inf, reserve=0.0)

    @classmethod
    def of_lambda(cls, context: Any, reserve: float = RESERVE_SECONDS) -> Budget:
        """The budget of a Lambda invocation (``context.get_remaining_time_in_millis``)."""
        return cls(lambda: context.get_remaining_time_in_millis() / 1000.0, reserve)

    @classmethod
    def after(cls, seconds: float, clock: Callable[[], float] = time.monotonic) -> Budget:
        """A deadline ``seconds`` from now on the monotonic clock, nothing reserved."""
        at = clock() + seconds
        return cls(lambda: at - clock(), reserve=0.0)

    def left(self) -> float:
        """Seconds this run may still spend on work (the reserve excluded; < 0 once past)."""
        return self._seconds_left() - self._reserve

    def remaining(self) -> float:
        """``left()``, never below 0."""
        return max(0.0, self.left())

    def allows(self, seconds: float) -> bool:
        """Whether a call that may take ``seconds`` fits in what is left."""
        return self.left() >= seconds

    def timeout(self, cap: float, *, keep: float = 0.0, floor: float = 1.0) -> float | None:
        """The timeout for the next call: ``cap``, or what is left (after keeping
        ``keep`` seconds for later calls) if that is less; None when less than
        ``floor`` is left (do not start the call)."""
        left = self.left() - keep
        return None if left < floor else min(cap, left)

    def socket_timeout(self, cap: float | None = None) -> float:
        """A socket timeout that ends by the deadline; raises DeadlineExceededError
        when it has passed (the call is already late, not merely unstarted)."""
        left = self.left()
        if left <= 0:
            raise DeadlineExceededError("the attempt's deadline passed")
        return left if cap is None else min(cap, left)
