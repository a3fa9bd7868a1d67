"""``air_runtime.Redactor``: secret values and their common encodings become ``***``."""

from __future__ import annotations

import base64
import copy
import json
import threading
from urllib.parse import quote, quote_plus

import pytest

from air_runtime import Redactor
from air_runtime._auth import OAuthM2M, StaticToken
from air_runtime._redaction import MIN_SECRET_LENGTH, REDACTED, credential_secrets

SECRET = 'hf_Ab/c+d e&f="g"é-0123456789'
RAW = SECRET.encode()

FORMS = {
    "plain": SECRET,
    "base64": base64.b64encode(RAW).decode(),
    "base64 unpadded": base64.b64encode(RAW).decode().rstrip("="),
    "base64url": base64.urlsafe_b64encode(RAW).decode(),
    "base64url unpadded": base64.urlsafe_b64encode(RAW).decode().rstrip("="),
    "quote": quote(SECRET, safe=""),
    "quote keeping /": quote(SECRET),
    "quote_plus": quote_plus(SECRET),
    "json": json.dumps(SECRET)[1:-1],
    "json unicode": json.dumps(SECRET, ensure_ascii=False)[1:-1],
}


@pytest.mark.parametrize("form", list(FORMS))
def test_each_encoding_is_redacted(form: str) -> None:
    redact = Redactor([SECRET])
    text = f"before {FORMS[form]} after\n"
    assert redact(text) == f"before {REDACTED} after\n"


def test_encodings_inside_larger_texts() -> None:
    redact = Redactor([SECRET])
    header = "Authorization: Basic " + base64.b64encode(RAW).decode()
    uri = "postgresql://user:" + quote(SECRET, safe="") + "@db:5432/x"
    config = json.dumps({"token": SECRET, "other": 1})
    for text in (header, uri, config):
        out = redact(text)
        assert REDACTED in out
        assert not any(form in out for form in FORMS.values())
    assert redact(config) == '{"token": "***", "other": 1}'


def test_padded_base64_wins_over_its_unpadded_prefix() -> None:
    value = "abcde"  # base64 "YWJjZGU=" ends in padding
    assert Redactor([value])(base64.b64encode(value.encode()).decode()) == REDACTED


def test_short_values_are_not_redacted_but_counted() -> None:
    redact = Redactor(["abc", "", None, "x" * MIN_SECRET_LENGTH])
    assert redact("abc run 123 xxxx") == "abc run 123 ***"
    assert redact.ignored == 1
    # Nor their encodings (base64 of 3 characters is 4).
    assert Redactor(["abc"])("YWJj abc") == "YWJj abc"


def test_multi_line_secrets_are_redacted_line_by_line() -> None:
    key = "-----BEGIN KEY-----\nMIIEvQIBADANBgkqhkiG9w0B\n-----END KEY-----"
    redact = Redactor([key])
    tail = "  | MIIEvQIBADANBgkqhkiG9w0B\n  | done"
    assert redact(tail) == "  | ***\n  | done"
    assert redact(key) == REDACTED


def test_add_with_values_and_data() -> None:
    base = Redactor(["token-0123"])
    derived = base.with_values(["other-4567"])
    assert derived("token-0123 other-4567") == "*** ***"
    assert base("token-0123 other-4567") == "*** other-4567"  # the base is unchanged
    base.add("other-4567")
    assert base.redact_data({"m": ["other-4567", 3], "n": ("token-0123",)}) == {
        "m": ["***", 3],
        "n": ("***",),
    }
    assert Redactor().include(base)("other-4567") == "***"
    assert Redactor()("nothing") == "nothing" and not Redactor().active
    assert base(None) == ""
    assert copy.deepcopy({"r": base})["r"]("token-0123") == "***"  # operators get copied
    assert "token" not in repr(base)


def test_credentials_say_what_to_redact() -> None:
    assert credential_secrets(StaticToken("dapi-static-token")) == ["dapi-static-token"]
    oauth = OAuthM2M("https://example.com", "client-id", "client-secret-value")
    assert credential_secrets(oauth) == ["client-secret-value"]
    assert credential_secrets(object()) == []


def test_adding_while_redacting_from_other_threads() -> None:
    redact = Redactor()
    values = [f"value-{i:04d}" for i in range(200)]
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            for _ in range(2000):
                redact("value-0001 value-0199")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    thread = threading.Thread(target=reader)
    thread.start()
    for value in values:
        redact.add(value)
    thread.join()
    assert not errors
    assert redact("value-0001 value-0199") == "*** ***"
