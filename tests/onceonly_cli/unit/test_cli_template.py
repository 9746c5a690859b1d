"""Reading template.yaml without CloudFormation: short-form tags, Globals merge,
plain env values kept and intrinsic ones reported, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from onceonly_cli.local.template import Intrinsic, TemplateError, find_function, function_ids, load_template
from tests.support import REPO_ROOT

TEMPLATE = """
Parameters:
  Kind: {Type: String}
Globals:
  Function:
    Timeout: 30
    MemorySize: 512
    Layers: [!Ref Layer, !Ref BuiltLayer]
    Environment:
      Variables:
        LEVEL: INFO
        FROM_GLOBALS: g
        STORE: !If [IsDynamo, !Sub "dynamodb://${Table}", !Ref AWS::NoValue]
Resources:
  Layer:
    Type: AWS::Serverless::LayerVersion
    Properties: {ContentUri: shared/}
  BuiltLayer:
    Type: AWS::Serverless::LayerVersion
    Properties: {ContentUri: layer/}
    Metadata: {BuildMethod: makefile}
  Table:
    Type: AWS::DynamoDB::Table
  Worker:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: functions/worker/
      Handler: app.handler
      Timeout: 12
      Environment:
        Variables:
          LEVEL: DEBUG
          QUEUE_URL: !GetAtt Queue.QueueUrl
          LONG_FORM: {"Fn::Sub": "x-${AWS::Region}"}
          ENABLED: true
          COUNT: 3
  Other:
    Type: AWS::Serverless::Function
    Properties: {CodeUri: functions/other/, Handler: main.run}
"""


@pytest.fixture
def template(tmp_path: Path) -> Path:
    path = tmp_path / "template.yaml"
    path.write_text(TEMPLATE)
    return path


def test_short_form_tags_load_as_markers(template: Path) -> None:
    data = load_template(template)
    layers = data["Globals"]["Function"]["Layers"]
    assert layers == [Intrinsic("Ref", "Layer"), Intrinsic("Ref", "BuiltLayer")]
    assert function_ids(data) == ["Worker", "Other"]


def test_function_props_win_over_globals(template: Path) -> None:
    spec = find_function(template, "Worker")
    assert spec.code_dir == (template.parent / "functions/worker").resolve()
    assert spec.handler == "app.handler"
    assert spec.timeout == 12.0
    assert spec.memory_mb == 512
    assert spec.environment == {"LEVEL": "DEBUG", "FROM_GLOBALS": "g", "ENABLED": "true", "COUNT": "3"}
    assert set(spec.unresolved_env) == {"STORE", "QUEUE_URL", "LONG_FORM"}
    # a source layer's folder goes on the path; a built one's (its Makefile) does not
    assert spec.layers == ((template.parent / "shared").resolve(),)


def test_globals_fill_in_what_the_function_omits(template: Path) -> None:
    spec = find_function(template, "Other")
    assert spec.timeout == 30.0
    assert spec.environment == {"LEVEL": "INFO", "FROM_GLOBALS": "g"}


def test_unknown_function_names_the_known_ones(template: Path) -> None:
    with pytest.raises(TemplateError, match=r"no function 'Nope' .*functions: Worker, Other"):
        find_function(template, "Nope")


def test_a_resource_that_is_not_a_function_is_refused(template: Path) -> None:
    with pytest.raises(TemplateError, match="no function 'Table'"):
        find_function(template, "Table")


def test_missing_and_broken_templates(tmp_path: Path) -> None:
    with pytest.raises(TemplateError, match="not found"):
        load_template(tmp_path / "absent.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("Resources: [unclosed\n")
    with pytest.raises(TemplateError, match="not valid YAML"):
        load_template(broken)
    empty = tmp_path / "empty.yaml"
    empty.write_text("Description: nothing\n")
    with pytest.raises(TemplateError, match="no Resources"):
        load_template(empty)


def test_the_projects_template_parses() -> None:
    root = REPO_ROOT
    data = load_template(root / "template.yaml")
    for logical_id in function_ids(data):
        spec = find_function(root / "template.yaml", logical_id)
        assert spec.code_dir.is_dir(), logical_id
        assert spec.timeout > 0
