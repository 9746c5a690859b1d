"""One test hook, off by default: a named pause point.

When the environment variable ``BILLING_PAUSE_AT`` names a point, the process
stops itself (SIGSTOP) the first time it reaches it. A test then either kills
it (a crash mid-job) or lets its lease expire and resumes it with SIGCONT (a
run paused past its lease). Nothing is read or waited on otherwise; Lambda
never sets the variable. The points are listed in docs/scheduled-jobs.md.
"""

from __future__ import annotations

import os
import signal

PAUSE_ENV = "BILLING_PAUSE_AT"


def pause_point(name: str) -> None:
    if os.environ.get(PAUSE_ENV) == name:
        del os.environ[PAUSE_ENV]  # once: a resumed run does not stop again
        os.kill(os.getpid(), signal.SIGSTOP)
