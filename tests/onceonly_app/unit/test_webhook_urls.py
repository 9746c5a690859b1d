"""Webhook URLs as a request can carry them (webhooks/urls.py): IDNA hosts,
percent-encoded paths and queries, refusals in one line."""

from __future__ import annotations

import pytest

from onceonly_app.webhooks.urls import UnencodableURLError, encoded_url


@pytest.mark.parametrize(("given", "sent"), [
    ("https://Bücher.example/in", "https://xn--bcher-kva.example/in"),  # a Latin-1 IDN host
    ("https://ドメイン.テスト/パス", "https://xn--eckwd4c7c.xn--zckzah/%E3%83%91%E3%82%B9"),  # outside Latin-1
    ("https://Example.COM:8443/a b\x7fc", "https://example.com:8443/a%20b%7Fc"),  # space and DEL in the path
    ("https://example.com/ü?q=ä b&x=1", "https://example.com/%C3%BC?q=%C3%A4%20b&x=1"),
    ("https://example.com/p%20q?x=%41", "https://example.com/p%20q?x=%41"),  # escapes kept as they are
    ("https://example.com/100%", "https://example.com/100%25"),  # a stray % is encoded
    ("https://[2001:db8::1]:8443/x", "https://[2001:db8::1]:8443/x"),
    ("HTTPS://example.com", "https://example.com"),
])
def test_hosts_are_idna_encoded_and_paths_percent_encoded(given: str, sent: str) -> None:
    assert encoded_url(given) == sent
    assert encoded_url(sent) == sent  # encoding the encoded changes nothing


@pytest.mark.parametrize(("url", "why"), [
    ("https://exa mple.com/", "holds a character no host name can have"),
    ("https://exa\x7fmple.com/", "holds a character no host name can have"),
    ("https://example.com/a\nb", "tab or a line break"),
    ("https://\u0300bc.example/", "not a valid internationalised domain name"),
    ("https://\u2603.example/", "not a valid internationalised domain name"),
])
def test_what_cannot_be_encoded_is_refused_in_one_line(url: str, why: str) -> None:
    with pytest.raises(UnencodableURLError, match=why) as refused:
        encoded_url(url)
    assert "\n" not in str(refused.value)
