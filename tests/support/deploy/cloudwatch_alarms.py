"""CloudWatch's evaluation of a metric alarm, as documented, for the
template's stale alarms: one metric, one statistic per period, the last
EvaluationPeriods complete periods, DatapointsToAlarm of them breaching for
ALARM (default: all), a period with no sample is missing and counts as
TreatMissingData says. Samples are (epoch seconds, value)."""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from typing import Any

COMPARE = {"LessThanThreshold": lambda v, t: v < t, "LessThanOrEqualToThreshold": lambda v, t: v <= t,
           "GreaterThanThreshold": lambda v, t: v > t, "GreaterThanOrEqualToThreshold": lambda v, t: v >= t}
STATISTICS = {"SampleCount": len, "Sum": sum, "Maximum": max, "Minimum": min}


@dataclass(frozen=True)
class Alarm:
    statistic: str
    period: int
    evaluation_periods: int
    datapoints_to_alarm: int
    threshold: float
    comparison: str
    treat_missing: str

    @classmethod
    def of(cls, properties: dict[str, Any], parameters: dict[str, Any]) -> Alarm:
        def value(node: Any) -> Any:
            return parameters[node["Ref"]] if isinstance(node, dict) and "Ref" in node else node

        periods = int(value(properties["EvaluationPeriods"]))
        return cls(properties["Statistic"], int(value(properties["Period"])), periods,
                   int(value(properties.get("DatapointsToAlarm", periods))), float(value(properties["Threshold"])),
                   properties["ComparisonOperator"], properties.get("TreatMissingData", "missing"))

    @property
    def window(self) -> int:
        return self.period * self.evaluation_periods

    def state(self, samples: list[tuple[float, float]], at: float) -> str:
        """ALARM, OK or INSUFFICIENT_DATA when evaluated at ``at``."""
        end = int(at // self.period) * self.period  # the last complete period ends here
        ordered = sorted(samples)
        times = [t for t, _ in ordered]
        breaching = present = 0
        for start in range(end - self.window, end, self.period):
            values = [v for _, v in ordered[bisect_left(times, start):bisect_left(times, start + self.period)]]
            if not values:
                if self.treat_missing == "breaching":
                    breaching += 1
                continue
            present += 1
            breaching += COMPARE[self.comparison](STATISTICS[self.statistic](values), self.threshold)
        if breaching >= self.datapoints_to_alarm:
            return "ALARM"
        if present == 0 and self.treat_missing == "missing":
            return "INSUFFICIENT_DATA"
        return "OK"
