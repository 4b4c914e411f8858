"""A harness's report is believed only with its signature: forged, altered or malformed reports are refused."""

from __future__ import annotations

import hashlib
import hmac
import json

from rsi_env.sandbox.signed import signed_body

SECRET = "ab" * 32


def _sign(body: dict, secret: str = SECRET) -> dict:
    text = json.dumps(body)
    return {"body": text, "mac": hmac.new(bytes.fromhex(secret), text.encode(), hashlib.sha256).hexdigest()}


def test_a_signed_report_is_read():
    assert signed_body(_sign({"correct": True, "speedup": 2.0}), SECRET) == {"correct": True, "speedup": 2.0}


def test_forged_altered_and_malformed_reports_are_refused():
    good = _sign({"correct": False})
    altered = {**good, "body": json.dumps({"correct": True})}
    assert signed_body(altered, SECRET) is None
    assert signed_body(_sign({"correct": True}, "cd" * 32), SECRET) is None  # signed under another secret
    for junk in (None, [], "x", {"body": 1, "mac": 2}, {"body": "{}"}, {"body": "[1]", "mac": _sign({})["mac"]},
                 {"body": "not json", "mac": "zz"}):
        assert signed_body(junk, SECRET) is None
    list_body = "[1, 2]"
    signed_list = {"body": list_body, "mac": hmac.new(bytes.fromhex(SECRET), list_body.encode(), hashlib.sha256).hexdigest()}
    assert signed_body(signed_list, SECRET) is None  # signed, but not an object
