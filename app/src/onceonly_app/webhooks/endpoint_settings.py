"""A subscription's own settings: custom headers sent with every attempt, a
description and metadata, and a signing secret the operator supplies (one
migrated from another sender). Each check raises ValueError with the reason,
before anything is written.

Custom headers are for what a merchant's gateway needs (an auth token, a
routing key). They can never stand in for the Standard Webhooks headers, nor
for what the sender itself sets (Host, Content-Type, ...): such names are
refused when set, and dropped again at send time, compared case-insensitively,
so a row written by other means cannot override them either."""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from onceonly_app.sql_queries import load_queries

from .sender import SENDER_HEADERS
from .signing import SECRET_PREFIX

SQL = load_queries(Path(__file__).with_suffix(".sql"))
MAX_HEADERS = 10
MAX_HEADER_VALUE = 1024
MAX_DESCRIPTION = 500  # the table's CHECK says the same
MAX_METADATA_BYTES = 4096
MIN_SECRET_BYTES = 24  # what new_secret makes; Svix accepts 24 to 64
MAX_SECRET_BYTES = 64
# RFC 9110 token characters: what a header name may be made of.
HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}")
# The signature headers (Standard Webhooks and their svix- aliases) and what the sender sets.
SIGNATURE_HEADERS = frozenset({"webhook-id", "webhook-timestamp", "webhook-signature",
                               "svix-id", "svix-timestamp", "svix-signature"})
RESERVED_HEADERS = SIGNATURE_HEADERS | SENDER_HEADERS | {"webhook-delivery"}


def check_headers(headers: Mapping[str, str] | None) -> dict[str, str]:
    """The headers as stored: at most MAX_HEADERS, valid names not reserved
    (any letter case), one value each without line breaks. None: no headers."""
    if headers is None:
        return {}
    if not isinstance(headers, Mapping):
        raise ValueError("headers must be a mapping of name to value")
    if len(headers) > MAX_HEADERS:
        raise ValueError(f"at most {MAX_HEADERS} custom headers, got {len(headers)}")
    checked: dict[str, str] = {}
    seen: set[str] = set()
    for name, value in headers.items():
        if not isinstance(name, str) or not HEADER_NAME.fullmatch(name):
            raise ValueError(f"header name {name!r} must be 1-64 token characters (letters, digits, - …)")
        lower = name.lower()
        if lower in RESERVED_HEADERS or lower.startswith(("webhook-", "svix-")):
            raise ValueError(f"header {name!r} is set by the sender itself and cannot be overridden")
        if lower in seen:
            raise ValueError(f"header {name!r} is named twice (names are case-insensitive)")
        seen.add(lower)
        if not isinstance(value, str) or len(value) > MAX_HEADER_VALUE or \
                any(ch in value for ch in "\r\n\0") or value != value.strip():
            raise ValueError(f"header {name!r}: the value must be text of at most {MAX_HEADER_VALUE} characters, "
                             "without line breaks or surrounding spaces")
        checked[name] = value
    return checked


def parse_header(text: str) -> tuple[str, str]:
    """``Name: value`` (the command line's --header) as a pair."""
    name, sep, value = text.partition(":")
    if not sep:
        raise ValueError(f"header {text!r} must be written 'Name: value'")
    return name.strip(), value.strip()


def check_description(description: str | None) -> str | None:
    if description is None:
        return None
    if not isinstance(description, str) or len(description) > MAX_DESCRIPTION or "\0" in description:
        raise ValueError(f"description must be text of at most {MAX_DESCRIPTION} characters")
    return description.strip()


def check_metadata(metadata: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A JSON object of at most MAX_METADATA_BYTES, string keys; kept as given."""
    if metadata is None:
        return None
    if not isinstance(metadata, Mapping) or not all(isinstance(key, str) for key in metadata):
        raise ValueError("metadata must be a JSON object (string keys)")
    try:
        encoded = json.dumps(metadata, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"metadata must be plain JSON: {exc}") from None
    if len(encoded.encode()) > MAX_METADATA_BYTES or "\\u0000" in encoded:
        raise ValueError(f"metadata must be at most {MAX_METADATA_BYTES} bytes of JSON, without NUL characters")
    return dict(metadata)


def check_secret(secret: str) -> str:
    """A supplied ``whsec_`` secret: base64 of MIN_SECRET_BYTES to MAX_SECRET_BYTES bytes."""
    if not isinstance(secret, str) or not secret.startswith(SECRET_PREFIX):
        raise ValueError(f"a signing secret must start with {SECRET_PREFIX}")
    try:
        key = base64.b64decode(secret[len(SECRET_PREFIX):], validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("a signing secret must be whsec_ followed by base64") from None
    if not MIN_SECRET_BYTES <= len(key) <= MAX_SECRET_BYTES:
        raise ValueError(f"a signing secret must hold {MIN_SECRET_BYTES}-{MAX_SECRET_BYTES} bytes, "
                         f"got {len(key)}")
    return secret


def request_headers(custom: Mapping[str, str], signed: Mapping[str, str]) -> dict[str, str]:
    """The headers of one attempt: the subscription's own, minus any reserved
    name (whatever its letter case), then the signature headers."""
    own = {name: value for name, value in custom.items()
           if name.lower() not in RESERVED_HEADERS and not name.lower().startswith(("webhook-", "svix-"))}
    return {**own, **signed}


def write(conn: psycopg.Connection[Any], subscription_id: str, *, headers: Mapping[str, str] | None = None,
          description: str | None = None, metadata: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Store the settings given (None: keep) on the subscription, in the
    caller's transaction, after it locked the row. Returns the changes, old and
    new, as the audit records them: header NAMES only, never their values (an
    auth token is a secret)."""
    with conn.cursor(row_factory=dict_row) as cur:
        before = cur.execute(SQL["settings"], {"webhook_id": subscription_id}).fetchone()
        if before is None:
            return {}
        cur.execute(SQL["set_settings"], {
            "webhook_id": subscription_id, "description": description,
            "headers": None if headers is None else Jsonb(dict(headers)),
            "metadata": None if metadata is None else Jsonb(dict(metadata))})
    changed: dict[str, Any] = {}
    if headers is not None and dict(headers) != before["headers"]:
        changed["headers"] = {"from": sorted(before["headers"]), "to": sorted(headers),
                              "values_changed": sorted(name for name in headers
                                                       if before["headers"].get(name) not in (None, headers[name]))}
    if description is not None and description != before["description"]:
        changed["description"] = {"from": before["description"], "to": description}
    if metadata is not None and dict(metadata) != before["metadata"]:
        changed["metadata"] = {"from": before["metadata"], "to": dict(metadata)}
    return changed
