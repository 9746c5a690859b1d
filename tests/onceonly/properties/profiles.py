"""How much the model checks run: a small size by default (CI), a big one for
the soak run. ``MODEL_PROFILE=soak`` gives every model test the big size; the
``soak``-marked tests have it anyway. Plain settings objects, not registered
profiles, so that other hypothesis tests in the session keep their own."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_COMMON = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
CI = settings(_COMMON, max_examples=30, stateful_step_count=20)
SOAK = settings(_COMMON, max_examples=100, stateful_step_count=40)
DEFAULT = SOAK if os.environ.get("MODEL_PROFILE") == "soak" else CI
