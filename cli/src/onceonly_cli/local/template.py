"""Read a SAM template the way `sam local invoke` would, without CloudFormation:
find a function, merge the Globals into it, and keep only what can be resolved
locally (plain strings). Intrinsics (!Ref, !Sub, !If, ...) become markers that
callers can recognise and drop."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..errors import read_user_file

FUNCTION_TYPES = ("AWS::Serverless::Function", "AWS::Lambda::Function")
DEFAULT_TIMEOUT = 3.0  # the Lambda default when neither the function nor Globals set one


class TemplateError(Exception):
    """The template is missing, unreadable or lacks what was asked for."""


@dataclass(frozen=True)
class Intrinsic:
    """A CloudFormation intrinsic function (``!Ref X`` or ``{"Ref": "X"}``), kept
    as a marker: it only has a value inside CloudFormation."""

    name: str
    value: Any


class _CloudFormationLoader(yaml.SafeLoader):
    """SafeLoader that accepts the short-form tags (``!Ref``, ``!Sub``, ``!GetAtt``…)."""


def _construct_intrinsic(loader: yaml.SafeLoader, tag_suffix: str, node: yaml.Node) -> Intrinsic:
    value: Any
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)  # type: ignore[arg-type]
    return Intrinsic(tag_suffix, value)


_CloudFormationLoader.add_multi_constructor("!", _construct_intrinsic)


def _is_intrinsic(value: Any) -> bool:
    """Short form (``!If``) or long form: a one-key mapping like ``{"Fn::If": [...]}``."""
    if isinstance(value, Intrinsic):
        return True
    if isinstance(value, dict) and len(value) == 1:
        key = str(next(iter(value)))
        return key == "Ref" or key.startswith("Fn::")
    return False


@dataclass(frozen=True)
class FunctionSpec:
    """What a local run of one function needs from the template."""

    logical_id: str
    code_dir: Path
    handler: str
    timeout: float
    memory_mb: int
    environment: dict[str, str] = field(default_factory=dict)
    unresolved_env: tuple[str, ...] = ()  # variables set by intrinsics: only AWS can resolve them
    layers: tuple[Path, ...] = ()  # local ContentUri folders of the layers in use


def load_template(path: Path) -> dict[str, Any]:
    text = read_user_file(path, "template", TemplateError)
    try:
        data = yaml.load(text, Loader=_CloudFormationLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise TemplateError(f"template {path} is not valid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict) or not isinstance(data.get("Resources"), dict):
        raise TemplateError(f"template {path} has no Resources section")
    return data


def function_ids(template: dict[str, Any]) -> list[str]:
    return [
        name
        for name, res in template["Resources"].items()
        if isinstance(res, dict) and res.get("Type") in FUNCTION_TYPES
    ]


def _layer_dirs(template: dict[str, Any], layers: Any, base: Path) -> tuple[Path, ...]:
    """The folders of source layers. A layer with a BuildMethod holds build
    instructions, not modules: what it builds (this project's layer: the
    library and the app) is installed in the environment the CLI runs in."""
    found: list[Path] = []
    for layer in layers or []:
        if isinstance(layer, Intrinsic) and layer.name == "Ref" and isinstance(layer.value, str):
            res = template["Resources"].get(layer.value, {})
            if not isinstance(res, dict) or (res.get("Metadata") or {}).get("BuildMethod"):
                continue
            uri = res.get("Properties", {}).get("ContentUri")
            if isinstance(uri, str):
                found.append((base / uri).resolve())
    return tuple(found)


def _number(value: Any, what: str, logical_id: str, default: float) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TemplateError(f"{logical_id}: {what} must be a number, got {value!r}")
    return float(value)


def find_function(template_path: Path, logical_id: str) -> FunctionSpec:
    """The function ``logical_id`` with the template's Globals merged in.
    Raises TemplateError if it is missing or lacks a local CodeUri/Handler."""
    template_path = Path(template_path)
    template = load_template(template_path)
    resources = template["Resources"]
    resource = resources.get(logical_id)
    if not isinstance(resource, dict) or resource.get("Type") not in FUNCTION_TYPES:
        known = ", ".join(function_ids(template)) or "none"
        raise TemplateError(f"no function {logical_id!r} in {template_path} (functions: {known})")
    globals_ = (template.get("Globals") or {}).get("Function") or {}
    props = resource.get("Properties") or {}

    def prop(name: str) -> Any:
        return props.get(name, globals_.get(name))

    code_uri, handler = prop("CodeUri"), prop("Handler")
    if not isinstance(code_uri, str) or not isinstance(handler, str):
        raise TemplateError(f"{logical_id} needs a local CodeUri folder and a Handler in {template_path}")
    base = template_path.resolve().parent
    env: dict[str, str] = {}
    unresolved: list[str] = []
    for source in (globals_, props):  # the function's own variables win over Globals
        variables = ((source.get("Environment") or {}).get("Variables")) or {}
        for key, value in variables.items():
            if _is_intrinsic(value):
                unresolved.append(key)
                env.pop(key, None)
            elif isinstance(value, bool):
                env[key] = str(value).lower()
            elif isinstance(value, str | int | float):
                env[key] = str(value)
                if key in unresolved:
                    unresolved.remove(key)
    return FunctionSpec(
        logical_id=logical_id,
        code_dir=(base / code_uri).resolve(),
        handler=handler,
        timeout=_number(prop("Timeout"), "Timeout", logical_id, DEFAULT_TIMEOUT),
        memory_mb=int(_number(prop("MemorySize"), "MemorySize", logical_id, 128)),
        environment=env,
        unresolved_env=tuple(unresolved),
        layers=_layer_dirs(template, prop("Layers"), base),
    )


def schedule_expression(template_path: Path, logical_id: str) -> str | None:
    """The ``Schedule`` of the function's first scheduled event (``rate(…)`` or
    ``cron(…)``), or None if it has none the template spells out."""
    resource = load_template(Path(template_path))["Resources"].get(logical_id)
    events = ((resource or {}).get("Properties") or {}).get("Events") or {}
    for event in events.values():
        if not isinstance(event, dict) or event.get("Type") not in ("Schedule", "ScheduleV2"):
            continue
        props = event.get("Properties") or {}
        expression = props.get("Schedule") or props.get("ScheduleExpression")
        if isinstance(expression, str):
            return expression
    return None


@dataclass(frozen=True)
class QueueSettings:
    """The SQS queue that feeds a function, as the template declares it."""

    queue: str  # its logical id
    max_receives: int  # RedrivePolicy.maxReceiveCount: receives before the dead-letter queue
    visibility_timeout: float  # seconds a received message stays hidden
    dead_letter_queue: str  # the logical id of its dead-letter queue


def _logical_id(value: Any) -> str | None:
    """The resource an ``!GetAtt X.Arn`` / ``!Ref X`` names (either form)."""
    if isinstance(value, Intrinsic):
        value = {f"Fn::{value.name}" if value.name != "Ref" else "Ref": value.value}
    if not isinstance(value, dict) or len(value) != 1:
        return None
    (key, arg), = value.items()
    if key == "Ref" and isinstance(arg, str):
        return arg
    if key == "Fn::GetAtt":
        target = arg.split(".", 1)[0] if isinstance(arg, str) else arg[0] if isinstance(arg, list) and arg else None
        return target if isinstance(target, str) else None
    return None


def source_queue(template_path: Path, logical_id: str) -> QueueSettings:
    """The settings of the SQS queue an event source mapping (or an SQS event)
    feeds ``logical_id`` from. Raises TemplateError if there is none, or it has
    no dead-letter queue: a redrive policy is what makes a failing record park."""
    template_path = Path(template_path)
    resources = load_template(template_path)["Resources"]
    sources = [_logical_id((r.get("Properties") or {}).get("EventSourceArn")) for r in resources.values()
               if isinstance(r, dict) and r.get("Type") == "AWS::Lambda::EventSourceMapping"
               and _logical_id((r.get("Properties") or {}).get("FunctionName")) == logical_id]
    events = ((resources.get(logical_id) or {}).get("Properties") or {}).get("Events") or {}
    sources += [_logical_id((e.get("Properties") or {}).get("Queue")) for e in events.values()
                if isinstance(e, dict) and e.get("Type") == "SQS"]
    queue = next((q for q in sources if q and (resources.get(q) or {}).get("Type") == "AWS::SQS::Queue"), None)
    if queue is None:
        raise TemplateError(f"{template_path}: no SQS queue feeds {logical_id}")
    props = resources[queue].get("Properties") or {}
    redrive = props.get("RedrivePolicy") or {}
    dead_letters = _logical_id(redrive.get("deadLetterTargetArn"))
    if dead_letters is None:
        raise TemplateError(f"{template_path}: {queue} has no RedrivePolicy with a deadLetterTargetArn")
    return QueueSettings(queue, int(_number(redrive.get("maxReceiveCount"), "maxReceiveCount", queue, 10)),
                         _number(props.get("VisibilityTimeout"), "VisibilityTimeout", queue, 30), dead_letters)
