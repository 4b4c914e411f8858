"""Run inside a sandbox: call ``block.py``'s ``decoder_layer`` on seeded random weights and inputs.

``python -I run_block.py CASES.json OUT.json``; needs torch (standard library otherwise; it is copied
into a fresh sandbox, away from the rsi_env package). CASES is ``{"config": {...}, "cases": [{"id",
"seed", "tokens", "first_position", "layer", "shapes": {name: shape}}]}``; OUT is ``{"outputs": {id:
[[float]]}, "errors": {id: text}}`` or ``{"error": text}``. The agent's block and the hidden reference
run through this same file, so both see bit-identical weights and inputs. Nothing here is trusted by
the env: it validates whatever comes back.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import sys
import traceback
from pathlib import Path
from typing import Any


def _tb(exc: BaseException) -> str:
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-4))
    return text.replace(os.getcwd() + "/", "")[-1500:]  # the run's random folder left out: the same run reads the same


def make_inputs(case: dict[str, Any], hidden: int) -> tuple[Any, Any, dict[str, Any]]:
    """Weights (norm weights near 1, matrices scaled by 1/sqrt(fan-in); the router 4x sharper) and inputs."""
    import torch

    g = torch.Generator().manual_seed(int(case["seed"]) * 1000 + int(case["layer"]))
    weights = {}
    for name in sorted(case["shapes"]):
        shape = case["shapes"][name]
        r = torch.randn(*shape, generator=g, dtype=torch.float64)
        if name.endswith("norm.weight"):
            weights[name] = 1.0 + 0.2 * r
        else:
            weights[name] = r * ((4.0 if name == "mlp.gate.weight" else 1.0) / math.sqrt(shape[-1]))
    x = torch.randn(int(case["tokens"]), hidden, generator=g, dtype=torch.float64)
    first = int(case["first_position"])
    positions = torch.arange(first, first + int(case["tokens"]), dtype=torch.int64)
    return x, positions, weights


def main(argv: list[str]) -> int:
    src, dst = Path(argv[1]), Path(argv[2])
    spec = json.loads(src.read_text())
    src.unlink()
    out: dict[str, Any] = {"outputs": {}, "errors": {}}
    try:
        import torch

        torch.set_num_threads(1)
        mod_spec = importlib.util.spec_from_file_location("block", Path("block.py").resolve())
        if mod_spec is None or mod_spec.loader is None:
            raise ImportError("block.py not found in the workspace")
        block = importlib.util.module_from_spec(mod_spec)
        mod_spec.loader.exec_module(block)
        if not callable(getattr(block, "decoder_layer", None)):
            raise AttributeError("block.py must define decoder_layer(x, positions, weights, config, layer_idx)")
        cfg = spec["config"]
        for case in spec["cases"]:
            x, positions, weights = make_inputs(case, int(cfg["hidden_size"]))
            try:
                y = block.decoder_layer(x.clone(), positions.clone(), {k: v.clone() for k, v in weights.items()},
                                        json.loads(json.dumps(cfg)), int(case["layer"]))
                out["outputs"][case["id"]] = torch.as_tensor(y).detach().to(torch.float64).tolist()
            except Exception as exc:  # the block's own failure, reported per case
                out["errors"][case["id"]] = _tb(exc)
    except Exception as exc:
        out = {"error": _tb(exc)}
    dst.write_text(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
