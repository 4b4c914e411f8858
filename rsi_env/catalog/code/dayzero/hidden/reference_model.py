"""Hidden reference of a whole tiny model: seeded random weights (a safetensors checkpoint) and greedy tokens.

``python -I reference_model.py CONFIG.json SEED PROMPTS.json NEW_TOKENS [TOKENS.json]`` in a fresh sandbox
beside ``reference_block.py``: writes ``model.safetensors`` (float32, named as in a Hugging Face checkpoint)
and ``tokens.json`` = ``{"tokens": [[id, ...] per prompt], "min_margin": gap}``: the greedy continuation of
each prompt by embedding -> ``decoder_layer`` x N -> final RMSNorm -> LM head (soft-capped where the config
says so), computed in float64 from the float32 weights; ``min_margin`` is the smallest gap between the
chosen and the runner-up logit.
Given ``TOKENS.json`` (another engine's continuations, one per prompt) it scores them instead, teacher
forced: ``gaps.json`` = ``{"gaps": [[g, ...] per prompt]}``, where ``g`` is how far the reference's best
logit lies above the given token's, on the given tokens before it (0 where the token is the reference's
choice). An engine whose arithmetic differs a little (float32 against float64) parts from the greedy
path only where the reference's top two logits are close, and its gaps stay that small.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import reference_block  # beside this file in the sandbox
import reference_spec
import torch
from safetensors.torch import save_file


def _gap(logits: torch.Tensor, token: int) -> float:
    return float(logits.max() - logits[token]) if 0 <= token < logits.numel() else math.inf


def main(argv: list[str]) -> int:
    cfg = json.loads(Path(argv[1]).read_text())
    seed, prompts, new = int(argv[2]), json.loads(Path(argv[3]).read_text()), int(argv[4])
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(seed)
    weights = {}
    for name, shape in sorted(reference_spec.weight_shapes(cfg).items()):
        r = torch.randn(*shape, generator=g, dtype=torch.float64)
        if name.endswith("norm.weight"):
            r = 1.0 + 0.2 * r
        elif name != "model.embed_tokens.weight":
            r = r / math.sqrt(shape[-1])
        weights[name] = r.to(torch.float32)
    save_file(weights, "model.safetensors")
    eps = float(cfg["rms_norm_eps"])

    w = {k: v.to(torch.float64) for k, v in weights.items()}
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])

    def next_logits(ids: list[int]) -> torch.Tensor:
        x = w["model.embed_tokens.weight"][torch.tensor(ids)]
        pos = torch.arange(len(ids))
        for i in range(int(cfg["num_hidden_layers"])):
            pre = f"model.layers.{i}."
            layer = {k[len(pre):]: v for k, v in w.items() if k.startswith(pre)}
            x = reference_block.decoder_layer(x, pos, layer, cfg, i)
        logits = reference_block.rms_norm(x[-1], w["model.norm.weight"], eps) @ head.T
        return reference_block.soft_cap(logits, cfg.get("final_logit_softcapping"))

    if len(argv) > 5:
        given = json.loads(Path(argv[5]).read_text())
        gaps = []
        for prompt, tokens in zip(prompts, given, strict=True):
            row, ids = [], list(prompt)
            for t in tokens[:new]:
                row.append(_gap(next_logits(ids), int(t)))
                ids.append(int(t))
            gaps.append(row)
        Path("gaps.json").write_text(json.dumps({"gaps": gaps}))
        return 0
    out, margin = [], math.inf
    for prompt in prompts:
        ids = list(prompt)
        for _ in range(new):
            logits = next_logits(ids)
            top = logits.topk(2).values
            margin = min(margin, float(top[0] - top[1]))
            ids.append(int(logits.argmax()))
        out.append(ids[len(prompt):])
    Path("tokens.json").write_text(json.dumps({"tokens": out, "min_margin": margin}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
