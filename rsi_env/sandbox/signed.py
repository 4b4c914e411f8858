"""`signed_body`: a harness's report, believed only if it carries the harness's signature.

A trusted harness that shares a sandbox with the agent's code (the kernel's timer, the scheduling
policy's driver) writes ``{"body": JSON text, "mac": HMAC-SHA256 of it}`` under a secret made for that
run and handed only to the harness; the agent's processes can write the report file, not sign it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

__all__ = ["signed_body"]


def signed_body(report: object, secret: str) -> dict[str, Any] | None:
    """The report's body (a JSON object) where its MAC under ``secret`` holds; None for anything else."""
    if not isinstance(report, dict):
        return None
    text, mac = report.get("body"), report.get("mac")
    if not isinstance(text, str) or not isinstance(mac, str):
        return None
    try:
        expect = hmac.new(bytes.fromhex(secret), text.encode(), hashlib.sha256).hexdigest()
        body = json.loads(text) if hmac.compare_digest(expect, mac) else None
    except (ValueError, TypeError):
        return None
    return body if isinstance(body, dict) else None
