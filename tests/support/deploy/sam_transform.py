"""Transform template.yaml with aws-sam-translator, as `sam deploy` would after
`sam package`: local CodeUri/ContentUri paths become S3 locations. Run with the
SAM venv's Python (aws-sam-translator lives there, next to the SAM CLI, so it
never holds back the project's runtime deps):

    .venv-sam/bin/python tests/support/deploy/sam_transform.py template.yaml BUCKET '{"StoreKind": "redis", ...}'

Prints the CloudFormation template as JSON. No AWS call is made.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from samtranslator.translator.transform import transform
from samtranslator.yaml_helper import yaml_parse

PSEUDO = {"AWS::Region": "us-east-1", "AWS::AccountId": "123456789012", "AWS::Partition": "aws"}


class _NoManagedPolicies:
    """The template names managed policies by ARN only; nothing to look up."""

    def load(self) -> dict[str, str]:
        return {}


def _packaged(template: dict[str, Any], bucket: str) -> dict[str, Any]:
    for logical_id, resource in template.get("Resources", {}).items():
        props = resource.get("Properties", {})
        for key in ("CodeUri", "ContentUri"):
            if isinstance(props.get(key), str) and not props[key].startswith("s3://"):
                props[key] = f"s3://{bucket}/{logical_id}.zip"
    return template


def main(path: str, bucket: str, parameters: str) -> None:
    template = _packaged(yaml_parse(Path(path).read_text()), bucket)
    values = {**PSEUDO, **json.loads(parameters)}
    print(json.dumps(transform(template, values, _NoManagedPolicies()), indent=1, default=str))


if __name__ == "__main__":
    main(*sys.argv[1:4])
