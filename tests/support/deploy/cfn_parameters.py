"""CloudFormation's checks of parameter values, as it makes them before it
changes anything: Type (Number, CommaDelimitedList), AllowedValues,
AllowedPattern (the whole value; each member of a list), MinValue/MaxValue,
MinLength/MaxLength, and a value for every parameter without a Default."""

from __future__ import annotations

import re
from typing import Any


def parameter_errors(declared: dict[str, dict[str, Any]], values: dict[str, str]) -> dict[str, str]:
    """{parameter: why CloudFormation refuses its value} for ``values`` (with
    the Defaults of those not given)."""
    errors: dict[str, str] = {}
    for name, spec in declared.items():
        value = values.get(name, spec.get("Default"))
        if value is None:
            errors[name] = "no value and no Default"
            continue
        value = str(value)
        members = value.split(",") if spec.get("Type") == "CommaDelimitedList" else [value]
        for member in members:
            why = _member_error(spec, member)
            if why:
                errors[name] = f"{value!r}: {why}"
                break
    return errors


def _member_error(spec: dict[str, Any], value: str) -> str | None:
    if spec.get("Type") == "Number":
        try:
            number = float(value)
        except ValueError:
            return "not a number"
        if "MinValue" in spec and number < float(spec["MinValue"]):
            return f"below MinValue {spec['MinValue']}"
        if "MaxValue" in spec and number > float(spec["MaxValue"]):
            return f"above MaxValue {spec['MaxValue']}"
    allowed = spec.get("AllowedValues")
    if allowed is not None and value not in [str(v) for v in allowed]:
        return f"not one of {allowed}"
    pattern = spec.get("AllowedPattern")
    if pattern is not None and not re.fullmatch(pattern, value):
        return f"does not match AllowedPattern {pattern}"
    if "MinLength" in spec and len(value) < int(spec["MinLength"]):
        return f"shorter than MinLength {spec['MinLength']}"
    if "MaxLength" in spec and len(value) > int(spec["MaxLength"]):
        return f"longer than MaxLength {spec['MaxLength']}"
    return None
