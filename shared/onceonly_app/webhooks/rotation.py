"""Rotate a subscription's signing secret with overlapping validity: the new
secret signs from now on, and the one it replaces keeps signing beside it for
``overlap`` seconds (Svix keeps an old secret 24 hours), so a receiver can
switch to the new secret at any moment of that window (docs/security.md)."""

from __future__ import annotations

from .deliveries import DeliveryRepository
from .signing import new_secret

DEFAULT_OVERLAP = 24 * 3600.0
MAX_PREVIOUS = 4  # a header carries at most 5 signatures, however often secrets rotate


class UnknownSubscriptionError(LookupError):
    """No subscription has that id."""


def check_overlap(overlap: float) -> None:
    if not overlap >= 0:
        raise ValueError(f"overlap must be >= 0 seconds, got {overlap}")


def rotate_secret(repo: DeliveryRepository, webhook_id: str, *, overlap: float = DEFAULT_OVERLAP,
                  secret: str | None = None) -> str:
    """Give ``webhook_id`` a new signing secret (``secret``, or a fresh one) and
    return it; the replaced one is still signed with for ``overlap`` seconds.
    Raises UnknownSubscriptionError."""
    check_overlap(overlap)
    secret = secret or new_secret()
    if not repo.rotate_secret(webhook_id, secret, overlap, MAX_PREVIOUS):
        raise UnknownSubscriptionError(f"unknown webhook_id {webhook_id!r}")
    return secret
