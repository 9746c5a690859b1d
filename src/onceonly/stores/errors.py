"""Driver errors -> onceonly errors, the same way on every store.

Each store's ``errors.py`` has one function, ``translate(exc, what)``: the
onceonly error (StoreUnavailableError, StoreRefusedError, StoreNotReadyError,
ConfigError) that a driver exception ``exc`` raised during operation ``what``
means, or None when ``exc`` is not the driver's (a bug: it propagates as it
is). :func:`translated` applies it around the code that calls the driver, so
no driver exception crosses the public API and each onceonly error keeps the
driver's as its ``__cause__``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ..errors import OnceOnlyError

# (driver exception, operation) -> the onceonly error, or None: not the driver's.
Translate = Callable[[BaseException, str], OnceOnlyError | None]


@contextmanager
def translated(translate: Translate, what: str) -> Iterator[None]:
    """Run the block; a driver exception leaves it as ``translate``'s onceonly
    error, raised from it. An onceonly error raised inside passes unchanged."""
    try:
        yield
    except OnceOnlyError:
        raise
    except Exception as exc:
        error = translate(exc, what)
        if error is None:
            raise
        raise error from exc
