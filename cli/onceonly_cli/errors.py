"""The one exception the command line turns into a one-line message and an exit code."""


class CliError(Exception):
    """A user-facing failure: ``str(exc)`` is printed as one line on stderr."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code
