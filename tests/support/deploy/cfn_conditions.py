"""Just enough of CloudFormation's condition logic for the offline deploy
checks: moto rejects ``Fn::If`` inside IAM policies, so the stack test resolves
those (and only those) with the stack's parameters first; the parameter tests
resolve a whole transformed template to see what one set of parameters deploys;
and the template's Rules are evaluated (moto ignores them)."""

from __future__ import annotations

from typing import Any

NO_VALUE = {"Ref": "AWS::NoValue"}


class Conditions:
    def __init__(self, template: dict[str, Any], parameters: dict[str, str]) -> None:
        declared = template.get("Parameters", {})
        self._params: dict[str, Any] = {name: spec.get("Default") for name, spec in declared.items()}
        self._params.update(parameters)
        for name, spec in declared.items():
            if spec.get("Type") == "CommaDelimitedList" and isinstance(self._params[name], str):
                self._params[name] = self._params[name].split(",")
        self._declared = template.get("Conditions", {})
        self._values: dict[str, bool] = {}

    @property
    def parameters(self) -> dict[str, Any]:
        return self._params

    def value(self, node: Any) -> Any:
        """A parameter's value for {"Ref": name}, a condition function's result."""
        return self._eval(node)

    def __getitem__(self, name: str) -> bool:
        if name not in self._values:
            self._values[name] = bool(self._eval(self._declared[name]))
        return self._values[name]

    def _eval(self, node: Any) -> Any:
        if not isinstance(node, dict):
            return node
        (fn, args), = node.items()
        if fn == "Ref":
            return self._params[args]
        if fn == "Condition":
            return self[args]
        if fn == "Fn::Equals":
            left, right = (self._eval(a) for a in args)
            return str(left) == str(right)
        if fn == "Fn::Not":
            return not self._eval(args[0])
        if fn == "Fn::And":
            return all(self._eval(a) for a in args)
        if fn == "Fn::Or":
            return any(self._eval(a) for a in args)
        if fn == "Fn::Join":
            return args[0].join(self._eval(args[1]))
        if fn == "Fn::EachMemberEquals":
            return all(str(member) == str(args[1]) for member in self._eval(args[0]))
        raise ValueError(f"condition function {fn} is not handled by the test")

    def resolve_ifs(self, node: Any) -> Any:
        """``node`` with every Fn::If replaced by its branch, AWS::NoValue dropped."""
        if isinstance(node, list):
            return [item for item in map(self.resolve_ifs, node) if item != NO_VALUE]
        if not isinstance(node, dict):
            return node
        if set(node) == {"Fn::If"}:
            name, when_true, when_false = node["Fn::If"]
            return self.resolve_ifs(when_true if self[name] else when_false)
        resolved = {key: self.resolve_ifs(value) for key, value in node.items()}
        return {key: value for key, value in resolved.items() if value != NO_VALUE}

    def deployed(self, template: dict[str, Any]) -> dict[str, Any]:
        """``template`` as these parameters deploy it: resources whose Condition
        is false left out, every Fn::If decided."""
        resources = {name: resource for name, resource in template["Resources"].items()
                     if "Condition" not in resource or self[resource["Condition"]]}
        return self.resolve_ifs({**template, "Resources": resources})

    def broken_rules(self, template: dict[str, Any]) -> list[str]:
        """The AssertDescription of every Rules assertion these parameters fail."""
        broken = []
        for rule in template.get("Rules", {}).values():
            if "RuleCondition" in rule and not self._eval(rule["RuleCondition"]):
                continue
            broken += [a["AssertDescription"] for a in rule["Assertions"] if not self._eval(a["Assert"])]
        return broken
