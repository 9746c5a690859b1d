"""Hypothesis strategies for hostile Lambda events: SQS records whose bodies are
not JSON, not objects, miss fields, carry wrong types, huge values, odd unicode
(NUL, lone surrogates, emoji) or share a message id; and EventBridge events that
are not scheduled events. Every "bad" value here is bad by construction, so a
handler that accepts one is wrong; every "good" value is valid."""

from __future__ import annotations

import json
import uuid
from typing import Any

from hypothesis import strategies as st

from onceonly_app.webhooks.messages import REQUIRED
from tests.support.functions.events import EVENTS_DIR, sample_event

MAX_EXAMPLES = 40  # per handler: CI stays in seconds
BAD_PAYLOAD_MARKER = "hostile-payload-marker"  # in the payload of every bad body that has one: never logged

# Strings that break naive code: NUL (PostgreSQL text refuses it), a lone
# surrogate (not encodable as UTF-8), right-to-left marks, emoji, long runs.
NASTY_STRINGS = st.sampled_from([
    "\x00", "a\x00b", "\ud800", "x\udfffy", "\u202e\u2066", "💥" * 50, "\ufeff", "' OR 1=1 --",
    "%(webhook_id)s", "${jndi:ldap://127.0.0.1/x}", "\n\r\t", "ä" * 300,
])
ODD_TEXT = st.one_of(NASTY_STRINGS, st.text(max_size=40))
WRONG_TYPES = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
                        st.floats(allow_nan=True, allow_infinity=True), st.lists(st.integers(), max_size=3),
                        st.dictionaries(st.text(max_size=5), st.integers(), max_size=3))
JSON_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=20))
JSON_VALUES = st.recursive(JSON_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)), max_leaves=12)


def sqs_record_template() -> dict[str, Any]:
    return json.loads((EVENTS_DIR / "webhook_dispatch.json").read_text(encoding="utf-8"))["Records"][0]  # type: ignore[no-any-return]


def sqs_record(body: Any, message_id: str | None = None) -> dict[str, Any]:
    record = sqs_record_template()
    record.update(messageId=message_id or str(uuid.uuid4()), receiptHandle=uuid.uuid4().hex, body=body)
    return record


def _not_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return True
    return False


@st.composite
def bad_message_bodies(draw: st.DrawFn, webhook_id: str, tenant_id: str) -> Any:
    """A dispatch message body that no handler may accept."""
    valid = {"webhook_id": webhook_id, "tenant_id": tenant_id, "event_id": f"evt-{uuid.uuid4().hex}",
             "event_type": "invoice.paid", "payload": {"n": 1, "marker": BAD_PAYLOAD_MARKER}}
    kind = draw(st.sampled_from(["not_json", "not_object", "missing", "wrong_type", "empty_id", "huge_id",
                                 "bad_time", "bad_sequence", "nul_id", "surrogate", "null_payload",
                                 "unknown_webhook", "raw_type", "huge_number", "deep"]))
    if kind == "not_json":
        return draw(st.one_of(st.text(max_size=60).filter(_not_json), st.sampled_from(["", "  ", "{", "[1,", "nan"])))
    if kind == "not_object":
        return json.dumps(draw(JSON_VALUES.filter(lambda v: not isinstance(v, dict))))
    if kind == "missing":
        gone = draw(st.sets(st.sampled_from(REQUIRED), min_size=1))
        return json.dumps({k: v for k, v in valid.items() if k not in gone})
    if kind == "wrong_type":
        field = draw(st.sampled_from(["webhook_id", "tenant_id", "event_id", "event_type"]))
        return json.dumps({**valid, field: draw(WRONG_TYPES.filter(lambda v: not isinstance(v, str)))})
    if kind == "empty_id":
        field = draw(st.sampled_from(["webhook_id", "tenant_id", "event_id", "event_type"]))
        return json.dumps({**valid, field: draw(st.sampled_from(["", " ", "\t\n"]))})
    if kind == "huge_id":
        return json.dumps({**valid, "event_id": "e" * draw(st.integers(257, 5000))})
    if kind == "bad_time":
        when = draw(st.one_of(WRONG_TYPES.filter(lambda v: v is not None), ODD_TEXT,
                              st.just("2026-01-01T00:00:00")))  # no offset
        return json.dumps({**valid, "occurred_at": when})
    if kind == "bad_sequence":
        return json.dumps({**valid, "sequence": draw(st.one_of(
            st.integers(max_value=-1), st.integers(min_value=2**63, max_value=2**80), st.booleans(),
            st.floats(), st.text(max_size=5)))})
    if kind == "nul_id":
        field = draw(st.sampled_from(["event_id", "event_type", "tenant_id"]))
        return json.dumps({**valid, field: "x\x00" + draw(st.text(max_size=5))})
    if kind == "surrogate":
        where = draw(st.sampled_from(["event_id", "payload"]))
        value = "x\ud800y"
        return json.dumps({**valid, where: {"note": value} if where == "payload" else value})
    if kind == "null_payload":
        return json.dumps({**valid, "payload": None})
    if kind == "unknown_webhook":
        return json.dumps({**valid, "webhook_id": "no-such-" + draw(ODD_TEXT.filter(lambda s: "\x00" not in s))
                           .encode("utf-8", "replace").decode("utf-8")})
    if kind == "huge_number":  # more digits than Python converts (sys.get_int_max_str_digits)
        field = draw(st.sampled_from(["sequence", "payload"]))
        return json.dumps({**valid, field: 0}).replace(f'"{field}": 0', f'"{field}": ' + "7" * draw(
            st.integers(4301, 20000)))
    if kind == "deep":  # nested deeper than the JSON parser's recursion allows
        depth = draw(st.integers(20_000, 60_000))
        return json.dumps(valid)[:-1] + ', "payload2": ' + "[" * depth + "]" * depth + "}"
    # raw_type: the record's body is not a string at all
    return draw(st.one_of(st.integers(), st.lists(st.integers(), max_size=2), st.dictionaries(
        st.text(max_size=3), st.integers(), max_size=2), st.booleans()))


@st.composite
def bad_payloads(draw: st.DrawFn) -> Any:
    """A payload a valid message may not carry: NUL in a string (jsonb refuses
    it) or larger than the limit."""
    kind = draw(st.sampled_from(["nul", "huge"]))
    if kind == "nul":
        return {"note": "a\x00" + draw(st.text(max_size=5))}
    from onceonly_app.events.limits import MAX_PAYLOAD_BYTES

    return {"blob": "x" * (MAX_PAYLOAD_BYTES + draw(st.integers(1, 4096)))}


def good_payloads() -> st.SearchStrategy[Any]:
    """Any JSON object a subscriber may be sent, unicode and nesting included."""
    safe_text = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"), max_size=30)
    values = st.recursive(
        st.one_of(st.none(), st.booleans(), st.integers(-2**53, 2**53), safe_text),
        lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(safe_text, inner, max_size=3)),
        max_leaves=10)
    return st.dictionaries(safe_text, values, max_size=4)


def good_event_ids() -> st.SearchStrategy[str]:
    """Valid event ids: unicode allowed, no NUL, no lone surrogate, not blank."""
    text = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"), min_size=1, max_size=40)
    return text.filter(lambda s: s.strip() != "")


@st.composite
def bad_scheduled_events(draw: st.DrawFn, function: str) -> Any:
    """Not an EventBridge scheduled event: a cron-guarded handler must refuse it."""
    event = sample_event(function)
    kind = draw(st.sampled_from(["not_mapping", "missing", "wrong_type", "bad_time", "naive_time",
                                 "wrong_source", "sqs_shaped"]))
    if kind == "not_mapping":
        return draw(st.one_of(st.none(), st.lists(st.integers(), max_size=3), st.text(max_size=20),
                              st.integers(), st.just([event])))
    if kind == "missing":
        for name in draw(st.sets(st.sampled_from(["source", "detail-type", "time"]), min_size=1)):
            event.pop(name)
        return event
    if kind == "wrong_type":
        name = draw(st.sampled_from(["source", "detail-type", "time"]))
        event[name] = draw(WRONG_TYPES)
        return event
    if kind == "bad_time":
        event["time"] = draw(st.one_of(ODD_TEXT, st.sampled_from(["0001-01-01T00:30:00+01:00", "2026-13-01T00:00Z",
                                                                   "yesterday", "9" * 400])))
        return event
    if kind == "naive_time":
        event["time"] = draw(st.datetimes()).isoformat()
        return event
    if kind == "wrong_source":
        event[draw(st.sampled_from(["source", "detail-type"]))] = draw(ODD_TEXT.filter(
            lambda s: s not in ("aws.events", "Scheduled Event")))
        return event
    return {"Records": [sqs_record("{}")]}  # an SQS event sent to a schedule


def good_scheduled_event(function: str, when: str) -> dict[str, Any]:
    event = sample_event(function)
    event.update(time=when, id=str(uuid.uuid4()))
    return event
