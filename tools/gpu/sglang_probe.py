"""Bring SGLang up on one GPU with dummy weights and measure one burst: the check that the carried recipe works.

``python tools/gpu/sglang_probe.py --model llama-3.1-8b --out DIR [--server-arg key=value ...]`` writes the model's
``config.json`` (from the catalog), starts SGLang's offline ``Engine`` with ``load_format="dummy"`` and
``skip_tokenizer_init=True``, sends a burst of token-id prompts with greedy sampling and a fixed output length,
and writes ``probe.json``: output tokens per second, the burst's wall time, SGLang's version and the server
arguments SGLang resolved. The real tier's measurements go through `rsi_env.real.sglang_driver`; this script only
answers "does SGLang start and serve here, and how fast".
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", default="llama-3.1-8b")
    p.add_argument("--out", required=True)
    p.add_argument("--requests", type=int, default=256)
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=512)
    p.add_argument("--server-arg", action="append", default=[], help="key=value (YAML value) for SGLang's ServerArgs")
    a = p.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)

    import numpy as np
    import sglang

    from rsi_env.engine.model import load_model
    from rsi_env.real.driver_inputs import model_folder, parse_assignments

    spec = load_model(a.model)
    folder, load_format = model_folder(spec)
    extra = parse_assignments(a.server_arg)
    t_start = time.perf_counter()
    engine = sglang.Engine(model_path=str(folder), load_format=load_format, skip_tokenizer_init=True, **extra)
    started_s = time.perf_counter() - t_start
    try:
        rng = np.random.default_rng(0)
        vocab = spec.vocab_size
        prompts = rng.integers(10, vocab - 10, size=(a.requests, a.prompt_len)).tolist()
        # ignore_eos gives every request exactly max_new_tokens; SGLang refuses min_new_tokens without a tokenizer.
        sp = {"max_new_tokens": a.output_len, "ignore_eos": True, "temperature": 0.0}
        engine.generate(input_ids=prompts[:8], sampling_params={**sp, "max_new_tokens": 16})
        t0 = time.perf_counter()
        outs = engine.generate(input_ids=prompts, sampling_params=sp)
        wall = time.perf_counter() - t0
        produced = [len(o.get("output_ids") or []) or int(o["meta_info"]["completion_tokens"]) for o in outs]
        info = engine.get_server_info()
        row = {
            "sglang": sglang.__version__, "model": a.model, "server_args_given": extra, "started_s": round(started_s, 1),
            "requests": a.requests, "prompt_len": a.prompt_len, "output_len": a.output_len,
            "produced_tokens": int(sum(produced)), "all_exact": all(n == a.output_len for n in produced),
            "burst_s": round(wall, 3), "output_tok_s": round(sum(produced) / wall, 1),
            "server_info": {k: v for k, v in info.items() if isinstance(v, (int, float, str, bool, type(None), list, dict))},
        }
    finally:
        engine.shutdown()
        shutil.rmtree(folder, ignore_errors=True)
    (out / "probe.json").write_text(json.dumps(row, indent=1, default=str))
    print(json.dumps({k: row[k] for k in ("sglang", "started_s", "output_tok_s", "burst_s", "all_exact")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
