"""The cost of one engine step: a roofline of the batch scaled by calibrated efficiencies.

A step's device time is the sum of its parts, each the slower of its FLOPs at the calibrated
compute rate and its bytes at the calibrated bandwidth: the decoder's linear layers (weights read
once per step, FLOPs on the CUDA-graph-padded token count; MoE reads only the experts the batch
activates), the LM head on the sampled rows, prefill attention (FLOPs of each chunk against its
context), decode attention (KV bytes read), tensor-parallel all-reduces, and per-step, per-request
and per-layer overheads (with fp8 weights, quantizing the activations before each linear layer). A MoE
model's routed experts run vLLM's fused-MoE grouped GEMM, whose FLOP rate is a calibrated fraction of a dense
GEMM's. Only a decode-only step within the captured sizes runs as one CUDA graph: a step with prompt tokens runs
piecewise graphs with each layer's attention called from Python, a step larger than the largest CUDA graph is
launched piece by piece (a MoE layer's pieces cost more), and with ``enforce_eager`` every layer's kernels are
launched one by one from Python: on one GPU all of it on the engine core's thread, which overlaps the kernels but not
the engine core's own CPU work (scheduling, outputs). With async scheduling
that thread runs beside the device and the slower of the two sets the step's time; without it the thread's own
work follows the step.

The same terms say where a step's time went (`rsi_env.engine.profile.PARTS`): the linear layers and the per-token
and per-request device work are ``weights``, prefill attention ``attention``, decode attention ``kv_read``, the
collectives ``comm``, the per-step fixed cost and eager launches ``launch``; the device's wait while the thread
launches a step outside a full CUDA graph is ``launch`` as well, and its wait for the engine core's own work
``engine_cpu`` (`StepCost.step_time`, `StepCost.engine_cpu_rest`).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from rsi_env.engine.config import ResolvedConfig
from rsi_env.engine.hardware import HardwareSpec
from rsi_env.engine.model import ModelSpec
from rsi_env.engine.telemetry import GRAPH_MODES
from rsi_env.sim.calibration import MM_REF_PARAMS, Calibration

__all__ = ["GRAPH_MODES", "SpanTerms", "StepCost"]

_NO_GRAPH, _PIECEWISE, _FULL = GRAPH_MODES["NONE"], GRAPH_MODES["PIECEWISE"], GRAPH_MODES["FULL"]
# Positions of the profile's parts (`rsi_env.engine.profile.PARTS`) in the list the engine accumulates.
_WEIGHTS, _ATTENTION, _KV_READ, _COMM, _ENGINE_CPU, _LAUNCH = range(6)
# What a decode span's steps are made of (`StepCost.decode_span`), for `StepCost.add_span_parts`: the kernels' time per
# step, the linear layers', the collectives', the overhead, its launch share, the device's own time the launches
# overlap, the launch time, the batch, the first step's context and the KV read's seconds per token.
SpanTerms = tuple[np.ndarray, float, float, float, float, float, float, int, float, float]
_NO_KERNELS = np.zeros(0)

def _roof(flops: float, flop_rate: float, nbytes: float, byte_rate: float, sharpness: float) -> float:
    """Soft maximum of compute and memory time: real kernels overlap the two imperfectly."""
    c, m = flops / flop_rate, nbytes / byte_rate
    return float((c**sharpness + m**sharpness) ** (1.0 / sharpness))


@dataclass
class StepCost:
    """Precomputed per-(model, hardware, config, calibration) constants and the step-time formula."""

    model: ModelSpec
    hw: HardwareSpec
    cfg: ResolvedConfig
    cal: Calibration
    # The token counts a step with prompt tokens runs under piecewise CUDA graphs, where they differ from the decode
    # sizes (``cfg.cudagraph_capture_sizes``): vLLM captures one list for both (None); SGLang captures its prefill
    # graphs up to its chunk size and none without chunking (`rsi_env.sim.sglang.sizing.prefill_graph_sizes`).
    prefill_graph_sizes: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        m, hw, cfg, cal = self.model, self.hw, self.cfg, self.cal
        tp, pp = cfg.tensor_parallel_size, cfg.pipeline_parallel_size
        wb = cfg.weight_dtype_bytes(m)
        peak = hw.fp8_flops if (cfg.quantization and hw.fp8_flops > 0) else hw.bf16_flops
        self._mm_rate = peak * cal.mm_eff
        self._quant_s = cal.quant_layer_s * m.num_layers if cfg.quantization else 0.0
        self._bw_rate = hw.mem_bw * cal.bw_eff
        self._attn_rate = hw.bf16_flops * cal.attn_eff
        self._kv_rate = hw.mem_bw * cal.kv_bw_eff
        dense_layers = m.num_layers - m.num_moe_layers
        # Weights every step reads regardless of the batch (attention, dense MLPs, shared experts, routers).
        fixed = m.num_layers * m.attn_params_per_layer + dense_layers * m.dense_mlp_params + m.num_moe_layers * (
            m.shared_expert_params + m.hidden_size * m.num_experts)
        self._fixed_w_bytes = fixed * wb / tp
        # FLOPs a token costs, the routed experts' weighted by their kernel's lower efficiency (a MoE prefill
        # runs vLLM's fused-MoE grouped GEMM, well below a dense GEMM's rate; decode is bandwidth-bound).
        expert_flops = 2.0 * m.num_moe_layers * m.num_experts_per_tok * m.expert_params / tp
        self._flops_per_token = 2.0 * m.active_layer_params / tp + expert_flops * (1.0 / cal.moe_mm_eff - 1.0)
        layer_params = max(1.0, m.active_layer_params / max(1, m.num_layers) / tp)
        self._mm_half = cal.mm_half_tokens * (MM_REF_PARAMS / layer_params) ** cal.mm_half_exp
        self._expert_bytes = m.expert_params * wb / tp
        self._lm_bytes = m.lm_head_params * m.dtype_bytes / tp
        self._lm_flops_per_row = 2.0 * m.hidden_size * m.vocab_size / tp
        layers_attn = m.num_layers
        # 4 FLOPs per (query, key) pair per head-dim element: QK^T and PV, multiply-add each.
        self._attn_flops_per_pair = 4.0 * m.num_heads * m.head_dim * layers_attn / tp
        self._kv_bytes_per_token = 2.0 * m.num_layers * max(1, m.num_kv_heads // tp) * m.head_dim * cfg.kv_dtype_bytes(m)
        self._window = m.sliding_window if (m.sliding_window and m.num_sliding_layers == m.num_layers) else None
        self.has_window = self._window is not None
        self._layers = m.num_layers
        self._moe_layers = m.num_moe_layers
        self._hidden_bytes = m.hidden_size * m.dtype_bytes
        self._comm_rate = hw.interconnect_bw * cal.comm_eff
        self._tp = tp
        self._pp = pp
        self._one_process = tp * pp == 1  # vLLM's uniprocess executor: the model runs on the engine core's thread
        self._async_one = bool(cfg.async_scheduling) and self._one_process  # `combine`: the overhead waits with the kernels
        # The launch share of `overhead` per `GRAPH_MODES` code (for the profile): the step's fixed cost, and outside
        # any CUDA graph the all-reduces launched from Python (eager layers are `dispatch`'s: the thread launches them).
        eager = 2.0 * cal.eager_allreduce_s * m.num_layers if tp > 1 else 0.0
        self._launch_fixed = {_NO_GRAPH: cal.step_s + eager, _PIECEWISE: cal.step_s, _FULL: cal.step_s}
        self._sizes = [int(x) for x in cfg.cudagraph_capture_sizes]
        self._max_graph = self._sizes[-1] if self._sizes else 0
        self._sizes_sorted = self._sizes == sorted(self._sizes)
        given = self.prefill_graph_sizes
        self._pre_sizes = self._sizes if given is None else sorted(int(x) for x in given)
        self._max_pre_graph = self._max_graph if given is None else (self._pre_sizes[-1] if self._pre_sizes else 0)
        # A step's linear layers and collectives depend only on its padded size, rows and kind: priced once each.
        self._batch_terms: dict[tuple[int, int, bool], tuple[float, float]] = {}
        self._span_terms: dict[tuple[int, int], tuple[float, float, float, float, float, int]] = {}

    # ---- pieces ---------------------------------------------------------------------------------
    def padded(self, num_tokens: int, uniform_decode: bool = True) -> int:
        """Tokens the step really runs: padded up to the next CUDA-graph capture size when one fits."""
        if not uniform_decode and self._pre_sizes is not self._sizes:
            pre = self._pre_sizes
            return pre[bisect.bisect_left(pre, num_tokens)] if num_tokens <= self._max_pre_graph else num_tokens
        if num_tokens <= self._max_graph:
            if self._sizes_sorted:
                return self._sizes[bisect.bisect_left(self._sizes, num_tokens)]
            return int(np.asarray(self._sizes)[np.searchsorted(self._sizes, num_tokens)])  # sizes as the user gave them
        return num_tokens

    def _batch(self, num_tokens: int, rows: int, uniform_decode: bool = True) -> tuple[float, float]:
        """The linear layers' and the collectives' time of a step of ``num_tokens`` over ``rows`` (remembered)."""
        key = (num_tokens, rows, uniform_decode)
        got = self._batch_terms.get(key)
        if got is None:
            tp_ = self.padded(num_tokens, uniform_decode)
            got = self._batch_terms[key] = (self._linear(tp_, rows), self._comm(tp_))
        return got

    def _linear(self, tokens_padded: int, rows: int) -> float:
        m = self.model
        w_bytes = self._fixed_w_bytes
        if m.is_moe:
            e, k = m.num_experts, m.num_experts_per_tok
            active = e * (1.0 - (1.0 - k / e) ** tokens_padded)
            w_bytes += m.num_moe_layers * active * self._expert_bytes
        sharp = self.cal.roofline_sharpness
        # GEMMs with few rows leave the tensor cores partly idle: efficiency saturates with the token count.
        rate = self._mm_rate * tokens_padded / (tokens_padded + self._mm_half)
        lm_rate = self._mm_rate * rows / (rows + self._mm_half)
        t = _roof(self._flops_per_token * tokens_padded, rate, w_bytes, self._bw_rate, sharp)
        return t + _roof(self._lm_flops_per_row * rows, lm_rate, self._lm_bytes, self._bw_rate, sharp)

    def _comm(self, tokens_padded: int) -> float:
        t = 0.0
        if self._tp > 1:
            nbytes = tokens_padded * self._hidden_bytes
            ring = 2.0 * (self._tp - 1) / self._tp * nbytes / self._comm_rate
            t += 2.0 * self._layers * (self.hw.interconnect_latency_s + self.cal.allreduce_s + ring)
        if self._pp > 1:
            t += (self._pp - 1) * (self.hw.interconnect_latency_s + tokens_padded * self._hidden_bytes / self._comm_rate)
        return t

    def overhead(self, num_tokens: int, num_reqs: int, uniform_decode: bool) -> float:
        """Device time every step adds to its kernels: fixed, per request and per token, and launch costs."""
        return self._overhead(num_tokens, num_reqs, self.graph_mode(num_tokens, uniform_decode))

    def _overhead(self, num_tokens: int, num_reqs: int, mode: int) -> float:
        cal = self.cal
        t = cal.step_s + cal.per_req_s * num_reqs + cal.per_token_s * num_tokens + self._quant_s
        if mode == _NO_GRAPH and self._tp > 1:  # two all-reduces a layer, each launched from Python
            t += 2.0 * cal.eager_allreduce_s * self._layers
        return t

    def dispatch(self, num_tokens: int, uniform_decode: bool = True) -> float:
        """CPU time to launch a compiled model's step that one full CUDA graph does not run.

        A step with prompt tokens runs piecewise CUDA graphs: the pieces between attention layers are replayed
        and each layer's attention is called from Python (``piecewise_layer_s`` a layer); a step above the
        largest captured size runs the compiled pieces through their Python wrappers (``uncaptured_layer_s``, and
        ``uncaptured_moe_layer_s`` a MoE layer). The GPU runs the launched kernels meanwhile, so this overlaps the
        kernels' own time, but not the engine core's own CPU work: vLLM's single-GPU executor launches the model
        on the engine core's thread, between scheduling the step and processing the previous step's output
        (`combine`). The real engine's step traces show it: under async scheduling the gap before a decode
        step's output is 6.1 ms when a decode step follows and 13-19 ms when a piecewise one does (new prompts or
        a prompt's next chunk alike), on Llama-3.1-8B `short_long`, one host at one time (8-10 ms at another);
        the piecewise step's own gap is 5-6 ms. Llama-3.2-1B, with half the layers, shows about half of it.
        A full CUDA graph (a decode-only step within the captured sizes) costs one launch, kept in ``step_s``.

        With ``enforce_eager`` no graph is captured and every layer's kernels are launched one by one from Python
        (``eager_layer_s`` a layer, any batch), on the same thread and beside the kernels in the same way: a
        small batch's eager decode step costs the launches plus the engine core's work, whatever the kernels
        take. The real engine's steps say so where model size and layer count part: an eager decode step of a
        few requests took 8-8.5 ms for Llama-3.2-1B's 16 layers and 13-16 ms for the 7-8B models' 28-32, whose
        kernels take 3-4 times as long (as kernels added to launches, the 1B's would cost ~6 ms). Profile part:
        ``launch`` (the device's wait while the thread launches).
        """
        return self._dispatch(self.graph_mode(num_tokens, uniform_decode))

    def _dispatch(self, mode: int) -> float:
        if self.cfg.enforce_eager:
            return self.cal.eager_layer_s * self._layers
        if mode == _NO_GRAPH:
            return self.cal.uncaptured_layer_s * self._layers + self.cal.uncaptured_moe_layer_s * self._moe_layers
        return self.cal.piecewise_layer_s * self._layers if mode == _PIECEWISE else 0.0

    def graph_mode(self, num_tokens: int, uniform_decode: bool) -> int:
        """How vLLM runs a step (a `GRAPH_MODES` code): without a CUDA graph, piecewise graphs or one full graph.

        Past the largest captured size no graph fits (an eager configuration captures none); a step with prompt
        tokens is held to `prefill_graph_sizes` where they are given.
        """
        if uniform_decode:
            return _FULL if num_tokens <= self._max_graph else _NO_GRAPH
        return _PIECEWISE if num_tokens <= self._max_pre_graph else _NO_GRAPH

    def cpu_time(self, num_running: int, num_new: int = 0) -> float:
        return self.cal.cpu_step_s + self.cal.cpu_per_req_s * num_running + self.cal.cpu_per_new_req_s * num_new

    def combine(self, kernels: Any, overhead: float, dispatch: float, cpu: float) -> Any:
        """Step wall time from the GPU's work and the engine core thread's.

        The thread launches the step (``dispatch``: outside a CUDA graph, for as long as the GPU may take to
        run it) and does the engine core's own work (``cpu``: schedule, process outputs). With async
        scheduling that work overlaps the GPU's (kernels and per-step overheads) and the slower side sets
        the pace; without it the thread waits for the step's output before its own work. Several GPUs have
        worker processes of their own (vLLM's multiprocessing executor): their launches leave the engine
        core's thread free. ``kernels`` is one step's, or a span's as an array (then so is the result).
        """
        mx = np.maximum if isinstance(kernels, np.ndarray) else max
        if not self.cfg.async_scheduling:
            return mx(kernels, dispatch) + overhead + cpu
        if self._one_process:
            return mx(kernels + overhead, dispatch + cpu)
        return mx(mx(kernels, dispatch) + overhead, cpu)

    @staticmethod
    def engine_cpu_rest(parts: list[float], busy: float) -> None:
        """Set ``engine_cpu`` to what the priced steps' wall time (``busy``) leaves after the other busy parts.

        `combine` makes a step's wall time its device work, plus the device's wait for launches, plus its wait for
        the engine core's own work (zero where the device is the slower side), so the rest is that last wait.
        """
        rest = busy - math.fsum(parts[k] for k in (_WEIGHTS, _ATTENTION, _KV_READ, _COMM, _LAUNCH))
        parts[_ENGINE_CPU] = max(rest, 0.0)

    # ---- a whole step --------------------------------------------------------------------------
    def _kernel_terms(self, num_tokens: int, num_reqs: int, decode_ctx_tokens: float, prefill_pairs: float,
                      prefill_ctx_tokens: float, uniform_decode: bool = True) -> tuple[float, float, float, float]:
        """A step's kernels by part: linear layers, collectives, prefill attention, KV reads (padded token count)."""
        lin, comm = self._batch(num_tokens, num_reqs, uniform_decode)
        return (lin, comm, prefill_pairs * self._attn_flops_per_pair / self._attn_rate,
                (decode_ctx_tokens + prefill_ctx_tokens) * self._kv_bytes_per_token / self._kv_rate)

    def kernels(self, num_tokens: int, num_reqs: int, decode_ctx_tokens: float, prefill_pairs: float,
                prefill_ctx_tokens: float) -> float:
        """The GPU kernels' time of a step: its roofline pieces, on the CUDA-graph-padded token count."""
        lin, comm, attn, kv = self._kernel_terms(num_tokens, num_reqs, decode_ctx_tokens, prefill_pairs,
                                                 prefill_ctx_tokens)
        return lin + comm + attn + kv

    def step_time(self, num_tokens: int, num_reqs: int, num_running: int, decode_ctx_tokens: float,
                  prefill_pairs: float, prefill_ctx_tokens: float, uniform_decode: bool, num_new: int = 0,
                  parts: list[float] | None = None) -> float:
        """Wall time of a step scheduling ``num_tokens`` over ``num_reqs`` requests.

        ``parts`` (a list in `rsi_env.engine.profile.PARTS` order) gets the step's device parts and launch wait added;
        the rest of the step's wall time is the device waiting for the engine core's own work (``engine_cpu``), which
        `engine_cpu_rest` fills in once for the whole run.
        """
        lin, comm, attn, kv = self._kernel_terms(num_tokens, num_reqs, decode_ctx_tokens, prefill_pairs,
                                                 prefill_ctx_tokens, uniform_decode)
        kernels = lin + comm + attn + kv
        mode = self.graph_mode(num_tokens, uniform_decode)
        overhead, dispatch = self._overhead(num_tokens, num_reqs, mode), self._dispatch(mode)
        wall = float(self.combine(kernels, overhead, dispatch, self.cpu_time(num_running, num_new)))
        if parts is not None:
            fixed = self._launch_fixed[mode]
            parts[_WEIGHTS] += lin + overhead - fixed
            parts[_ATTENTION] += attn
            parts[_KV_READ] += kv
            parts[_COMM] += comm
            parts[_LAUNCH] += fixed
            if dispatch:  # the device waits while the thread launches the step
                parts[_LAUNCH] += max(dispatch - kernels - (overhead if self._async_one else 0.0), 0.0)
        return wall

    def _span(self, batch: int, num_running: int) -> tuple[float, float, float, float, float, int]:
        """A uniform-decode step's constant terms: linear layers, collectives, overhead, dispatch, engine CPU, mode."""
        key = (batch, num_running)
        got = self._span_terms.get(key)
        if got is None:
            lin, comm = self._batch(batch, batch)
            mode = self.graph_mode(batch, True)
            got = self._span_terms[key] = (lin, comm, self._overhead(batch, batch, mode), self._dispatch(mode),
                                           self.cpu_time(num_running), mode)
        return got

    def decode_span(self, batch: int, num_running: int, ctx0: float, steps: int) -> tuple[np.ndarray, SpanTerms]:
        """Wall times of ``steps`` consecutive uniform-decode steps of ``batch`` requests, and their terms.

        The context read grows by ``batch`` tokens each step; everything else is constant, so the
        span costs one roofline evaluation and a vector operation. The terms (a plain tuple: a span costs
        microseconds) give the parts of however many of its steps are taken (`add_span_parts`).
        """
        lin, comm, overhead, dispatch, cpu, mode = self._span(batch, num_running)
        base = lin + comm
        ctx = ctx0 + batch * np.arange(steps, dtype=np.float64)
        if self._window is not None:
            ctx = np.minimum(ctx, batch * float(self._window))
        kv_rate = self._kv_bytes_per_token / self._kv_rate
        kernels = base + ctx * kv_rate
        times = np.asarray(self.combine(kernels, overhead, dispatch, cpu))
        return times, (kernels, lin, comm, overhead, self._launch_fixed[mode], overhead if self._async_one else 0.0,
                       dispatch, batch, ctx0, kv_rate)

    def decode_span_until(self, batch: int, num_running: int, ctx0: float, steps: int,
                          until: float = math.inf) -> tuple[int, Any, float, SpanTerms]:
        """`decode_span`, stopped after the first step that ends at or after ``until`` seconds from the span's start.

        Returns ``(steps taken, the steps' cumulative wall times, the last step's wall time, terms)``, the same
        numbers as `decode_span` and a cumulative sum give. A span the next arrival cuts short is priced step by step
        in Python, for as long as it lasts; an uncut long one as a vector.
        """
        if steps > 48 and until == math.inf:
            times, terms = self.decode_span(batch, num_running, ctx0, steps)
            return steps, np.cumsum(times), float(times[-1]), terms
        lin, comm, overhead, dispatch, cpu, mode = self._span(batch, num_running)
        base = lin + comm
        cap = batch * float(self._window) if self._window is not None else math.inf
        kv_rate = self._kv_bytes_per_token / self._kv_rate
        combine = self.combine
        cum: list[float] = []
        kernels: list[float] = []
        t = dt = 0.0
        for j in range(steps):
            ctx = ctx0 + batch * float(j)
            kern = base + (ctx if ctx <= cap else cap) * kv_rate
            kernels.append(kern)
            dt = combine(kern, overhead, dispatch, cpu)
            t = dt if j == 0 else t + dt
            cum.append(t)
            if t >= until:
                break
        parts_need = self._window is not None or dispatch  # `add_span_parts` reads the kernels' times only then
        terms = (np.asarray(kernels) if parts_need else _NO_KERNELS, lin, comm, overhead, self._launch_fixed[mode],
                 overhead if self._async_one else 0.0, dispatch, batch, ctx0, kv_rate)
        return len(cum), cum, dt, terms

    def add_span_parts(self, parts: list[float], terms: SpanTerms, steps: int) -> None:
        """Add the parts of a decode span's first ``steps`` steps (`decode_span`'s terms), by `step_time`'s rule."""
        kernels, lin, comm, overhead, fixed, overlapped, dispatch, batch, ctx0, kv_rate = terms
        k = steps
        if self._window is not None:  # the context stops growing at the window
            kv = float(kernels[:k].sum()) - k * (lin + comm)
        else:  # the context grows by the batch each step: an arithmetic series
            kv = (k * ctx0 + batch * k * (k - 1) / 2.0) * kv_rate
        parts[_WEIGHTS] += k * (lin + overhead - fixed)
        parts[_COMM] += k * comm
        parts[_KV_READ] += kv
        parts[_LAUNCH] += k * fixed
        if dispatch:  # the device waits while the thread launches each step
            parts[_LAUNCH] += float(np.maximum(dispatch - kernels[:k] - overlapped, 0.0).sum())

    def window(self, ctx: int) -> int:
        """Context a sliding-window model attends to (the whole context otherwise)."""
        return min(ctx, self._window) if self._window is not None else ctx

    @staticmethod
    def chunk_pairs(new: float, ctx_before: float) -> float:
        """Causal (query, key) pairs of a prefill chunk of ``new`` tokens after ``ctx_before`` ones."""
        return new * ctx_before + new * (new + 1) / 2.0

