"""The template as one stack of a store kind deploys it, and its IAM roles."""

from __future__ import annotations

from typing import Any

from tests.support.deploy.cfn_conditions import Conditions
from tests.support.deploy.stack import parameters_for, transformed


def deployed(kind: str, **extra: str) -> dict[str, Any]:
    parameters = parameters_for(kind, **extra)
    template = transformed(parameters)
    return Conditions(template, parameters).deployed(template)


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def function_roles(template: dict[str, Any]) -> dict[str, str]:
    """Each function's execution role: one of the template's own roles."""
    roles = {}
    for name, resource in template["Resources"].items():
        if resource["Type"] == "AWS::Lambda::Function":
            role, attribute = resource["Properties"]["Role"]["Fn::GetAtt"]
            assert attribute == "Arn" and template["Resources"][role]["Type"] == "AWS::IAM::Role", name
            roles[name] = role
    assert len(roles) == 7
    return roles
