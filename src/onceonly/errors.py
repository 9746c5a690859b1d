"""The exceptions of onceonly. Driver errors never cross the public API raw:
backends wrap them in one of these with ``raise ... from exc``."""


class OnceOnlyError(Exception):
    """Base of every error onceonly raises."""


class ConfigError(OnceOnlyError, ValueError):
    """A bad store URL, an unknown scheme, a bad option or argument (e.g. ttl <= 0)."""


class LeaseLostError(OnceOnlyError):
    """The lease is no longer held by this holder: it expired and was granted to
    someone else (a higher fencing token), or it was released or completed."""


class StoreUnavailableError(OnceOnlyError):
    """The store could not be reached or answered with an error. Nothing was granted."""


class StoreRefusedError(StoreUnavailableError):
    """The server (or a pooler or proxy in front of it) refused the connection
    in a way a retry will not change: bad credentials, an unknown database, a
    refused startup parameter. The message is the server's. Nothing was granted."""


class StoreNotReadyError(OnceOnlyError):
    """The table, schema or index the store needs is missing: run ``store.setup()``
    or deploy the template's resources."""
