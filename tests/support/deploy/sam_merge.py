"""What `sam deploy` sends CloudFormation for an update: its own parameter
merging (DeployContext.merge_parameters: UsePreviousValue for every parameter
without an override) and its Deployer.create_changeset (which drops
UsePreviousValue for parameters the stack does not have yet), replayed against
a stand-in CloudFormation client that has a stack made from OLD_TEMPLATE. Run
with the SAM venv's Python (samcli lives there):

    .venv-sam/bin/python tests/support/deploy/sam_merge.py NEW_TEMPLATE '[["OLD_TEMPLATE", {"Key": "override"}], ...]'

Prints, as JSON, for each old template (and the overrides given with it) the
Parameters of the CreateChangeSet call and the Parameters and Rules of the old
template, then those of the new one, parsed as CloudFormation reads them. No
AWS call is made.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from samcli.commands.deploy.deploy_context import DeployContext
from samcli.lib.deploy.deployer import Deployer
from samtranslator.yaml_helper import yaml_parse


class StackOfOldTemplate:
    """The CloudFormation calls create_changeset makes, for an existing stack
    whose template is the old one."""

    def __init__(self, old: dict[str, Any]) -> None:
        self._old = old
        self.change_sets: list[dict[str, Any]] = []

    def describe_stacks(self, StackName: str) -> dict[str, Any]:  # noqa: N803 - boto3's names
        return {"Stacks": [{"StackName": StackName, "StackStatus": "UPDATE_COMPLETE"}]}

    def get_template_summary(self, StackName: str) -> dict[str, Any]:  # noqa: N803
        return {"Parameters": [{"ParameterKey": key} for key in self._old.get("Parameters", {})]}

    def create_change_set(self, **kwargs: Any) -> dict[str, str]:
        self.change_sets.append(kwargs)
        return {"Id": "changeset", "StackId": "stack"}


def _checked(template: dict[str, Any]) -> dict[str, Any]:
    return {key: template.get(key, {}) for key in ("Parameters", "Rules")}


def upgrade(old: dict[str, Any], new: dict[str, Any], overrides: dict[str, str]) -> dict[str, Any]:
    client = StackOfOldTemplate(old)
    parameters = DeployContext.merge_parameters(new, overrides)
    Deployer(client).create_changeset("onceonly", json.dumps(new), parameters, None, None, None, None, [])
    (change_set,) = client.change_sets
    return {"parameters": change_set["Parameters"], "old": _checked(old)}


def main(new_path: str, upgrades: str) -> None:
    new = yaml_parse(Path(new_path).read_text())
    print(json.dumps({"upgrades": [upgrade(yaml_parse(Path(old_path).read_text()), new, overrides)
                                   for old_path, overrides in json.loads(upgrades)],
                      "new": _checked(new)}))


if __name__ == "__main__":
    main(*sys.argv[1:3])
