"""SGLang's logged passes: the lines SGLang 0.5.17's scheduler logs for each prefill pass and every
``decode_log_interval``-th decode pass, read off the driver's stderr while it is still passed on.

The lines are SGLang 0.5.17's format (``managers/scheduler_components/metrics_reporter.py``); the children here are
plain Python processes that write such lines to the stderr they inherit, as SGLang's scheduler process does.
"""

from __future__ import annotations

import subprocess
import sys

import rsi_env.real.sglang_passes as passes_mod
from rsi_env.real.sglang_passes import LoggedPasses, parse_pass

PREFILL = ("[2026-12-06 03:00:33] Prefill batch, #new-seq: 3, #new-token: 240, #cached-token: 16, token usage: 0.01, "
           "#running-req: 118, #queue-req: 130, #pending-token: 0, cuda graph: False, input throughput (token/s): "
           "12345.67")
DECODE = ("[2026-12-06 03:00:33 TP0] Decode batch [812], #running-req: 121, #token: 9000, token usage: 0.02, "
          "cuda graph: True, gen throughput (token/s): 6020.50, #queue-req: 127, ")


def test_a_prefill_and_a_decode_line_parse_to_their_counts():
    p = parse_pass(PREFILL)
    assert p is not None and p["kind"] == "prefill"
    assert (p["new_seq"], p["new_token"], p["cached_token"], p["running"], p["queue"]) == (3, 240, 16, 118, 130)
    assert p["graph"] is False
    d = parse_pass(DECODE)
    assert d is not None and d["kind"] == "decode"
    assert (d["running"], d["queue"], d["graph"], d["gen_throughput"]) == (121, 127, True, 6020.5)
    assert parse_pass("[2026-12-06 03:00:33] Load weight end. type=LlamaForCausalLM") is None
    assert parse_pass("Prefill batch, #new-seq: many") is None  # a number that is not one: no pass, no exception


def _child(code: str) -> None:
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30)  # inherits fd 2, as SGLang's processes do;
    # a reader that stopped draining would block it on a full pipe: TimeoutExpired, not a hung test


def test_passes_written_by_a_child_process_are_read_and_still_reach_stderr(capfd):
    with LoggedPasses() as log:
        start = log.mark()
        _child(f"import sys; print({PREFILL!r}, file=sys.stderr); print('other text', file=sys.stderr); "
               f"print({DECODE!r}, file=sys.stderr)")
        passes = log.since(start, settle_s=2.0, expect=2)
    assert [p["kind"] for p in passes] == ["prefill", "decode"]
    assert all(p["t"] >= 0.0 for p in passes)
    err = capfd.readouterr().err
    assert PREFILL in err and "other text" in err and DECODE in err  # the stderr the real tier classifies


def test_a_flood_or_bad_bytes_on_stderr_neither_block_nor_stop_the_reader():
    with LoggedPasses() as log:
        _child("import sys; sys.stderr.buffer.write(b'\\xff\\xfe junk\\n' + b'x' * 4_000_000 + b'\\n'); "
               f"print({PREFILL!r}, file=sys.stderr)")
        passes = log.since(0, settle_s=5.0, expect=1)
    assert [p["kind"] for p in passes] == ["prefill"]


def test_the_trace_keeps_each_pass_in_columns():
    with LoggedPasses() as log:
        _child(f"import sys; [print({PREFILL!r}, file=sys.stderr) for _ in range(3)]")
        trace = LoggedPasses.columns(log.since(0, settle_s=2.0, expect=3))
    assert trace["kind"] == ["prefill"] * 3 and trace["new_token"] == [240] * 3 and len(trace["t"]) == 3


def test_a_line_the_parser_chokes_on_does_not_stop_the_draining(monkeypatch, capfd):
    """Were the reader to stop, SGLang's processes would block on a full pipe: the engine would hang."""
    real = passes_mod.parse_pass

    def choke(line: str):
        if "#new-seq: 1," in line:
            raise IndexError("a format nobody foresaw")
        return real(line)

    monkeypatch.setattr(passes_mod, "parse_pass", choke)
    odd = PREFILL.replace("#new-seq: 3,", "#new-seq: 1,")
    with LoggedPasses() as log:
        _child(f"import sys; print({odd!r}, file=sys.stderr); sys.stderr.write('y' * 300_000 + '\\n'); "
               f"print({DECODE!r}, file=sys.stderr)")
        got = log.since(0, settle_s=3.0, expect=1)
    assert [p["kind"] for p in got] == ["decode"] and odd in capfd.readouterr().err
