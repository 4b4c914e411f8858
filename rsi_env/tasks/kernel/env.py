"""RSI/Kernel-v1 (and v0): write a faster vLLM operator, checked against float64 and timed against PyTorch eager."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from gymnasium.utils import RecordConstructorArgs

from rsi_env.engine.model import load_model
from rsi_env.engine.task import Task, load_task
from rsi_env.engine.tier import Tier
from rsi_env.envs.core import Measurement, RsiEnv
from rsi_env.envs.observation import clean
from rsi_env.errors import RsiEnvError
from rsi_env.reward.guards import GuardResult
from rsi_env.sandbox.deadline import untimed
from rsi_env.sandbox.profile import Profile
from rsi_env.sandbox.workspace import EditError
from rsi_env.tasks.kernel.tier import (
    DTYPES,
    HARNESS_TIMEOUT_S,
    KERNEL_DIR,
    KernelResult,
    KernelTier,
    check_dtype,
    kernel_profile,
)

__all__ = ["DTYPES", "KERNEL_FIELDS", "OPS", "TEMPLATES", "V0_OPS", "KernelEnv", "KernelEnvV0", "model_sizes"]

# An op is a starting kernel in the catalog (the harness's ops.py defines its inputs; it imports torch, this may not).
# templates/ holds the current version's; templates/v0/ those of v0 that v1 replaced.
TEMPLATES = KERNEL_DIR / "templates"
OPS = tuple(sorted(p.stem for p in TEMPLATES.glob("*.py")))
V0_OPS = ("paged_attention_decode", "rms_norm_residual", "rotary_embedding", "silu_and_mul")   # RSI/Kernel-v0's
KERNEL_FILE = "kernel.py"
KERNEL_FIELDS = ("speedup_vs_reference", "speedup_vs_start", "correct", "kernel_ms", "reference_ms")
CHECK_SEEDS = 3          # input sets checked per measurement (each a fresh shape and dtype)
TIMED_SHAPES = 2         # of which the first are timed
_SUBMIT_SEED_OFFSET = 1_000_003   # submit checks seeds the agent's benches never used


def model_sizes(name: str) -> dict[str, int]:
    """The sizes of a catalog model the shapes are drawn from."""
    m = load_model(name)
    return {"hidden_size": m.hidden_size, "intermediate_size": m.intermediate_size, "num_heads": m.num_heads,
            "num_kv_heads": m.num_kv_heads, "head_dim": m.head_dim, "num_experts": m.num_experts,
            "num_experts_per_tok": m.num_experts_per_tok}


class KernelEnv(RsiEnv):
    """Write one of vLLM's hot operators in ``kernel.py`` so that it is correct and faster than PyTorch eager.

    ## Description

    One operator per episode (``op=``), each one vLLM runs as a custom kernel:

    - ``rms_norm_residual``: ``fused_add_rms_norm`` (``residual += x``, ``out = rmsnorm(residual) * weight``);
    - ``silu_and_mul``: the gated MLP activation;
    - ``rotary_embedding``: neox style, positions into a cos/sin cache;
    - ``paged_attention_decode``: one decode step over a paged KV cache, grouped-query attention;
    - ``reshape_and_cache``: the paged KV-cache write (``reshape_and_cache_flash``: each token's key and
      value into its slot, padding tokens at slot -1 written nowhere; exact);
    - ``dynamic_per_token_scaled_fp8_quant``: a float32 scale per row (``amax / 448``) and the row
      quantised to ``float8_e4m3fn``;
    - ``moe_sum``: the sum of a token's top-k expert outputs;
    - ``moe_align_block_size``: a step's routed (token, expert) pairs grouped by expert, each group padded to
      the fused MoE GEMM's block size (integer outputs, exact; no dtype).

    ``kernel.py`` starts as a deliberately naive, correct implementation whose docstring states the contract;
    shapes come from the model's sizes (``model=``, Llama-3.1-8B by default; a dense model's MoE ops draw
    their experts) with a batch drawn per seed, and a dtype (bf16, fp16, fp32: the input's, for fp8
    quantisation) drawn per seed unless ``dtype=`` pins it.

    A measurement runs the hidden harness in a fresh sandbox (`rsi_env.tasks.kernel.tier`): the kernel
    runs in a process of its own on fresh inputs with NaN-poisoned outputs (and NaN in the slots an
    in-place write must fill), all in memory the harness owns and shares with it; the harness, in another
    process, stops the kernel's whole process tree the moment each call returns and reads the results
    there itself: it compares every output, in-place result and untouched input with a float64 reference
    (per-dtype tolerances; exact for the cache write and the MoE alignment; half an fp8 step for fp8), and
    times the kernel against vLLM's ``forward_native`` (PyTorch eager) in interleaved blocks, alternating
    which goes first, with its own clock, every block checked for poison (NaN, or -2**31 in an integer
    output) and one set drawn after the call checked in full.
    A time per call that would move the op's bytes faster than 1.5x the device's measured memory
    bandwidth is refused (``excessive_speedup``: it pays nothing and fails submit). Its report is signed.
    On the ``sim`` tier (the cheap one: nothing is simulated, CPU time stands in for the GPU's) calls run
    on one CPU core; ``tier="real"`` runs the same harness on CUDA with serving-sized batches (an error
    says so where no CUDA device is visible).

    ## Arguments

    ``gym.make("RSI/Kernel-v1", op="rms_norm_residual", dtype=None, tier="sim", model=None, max_steps=None,
    auto_bench=None, seed=None, max_measurements=None, min_speedup=None, sandbox="auto",
    shell_timeout_s=10.0)``: ``op``, ``dtype`` (None: drawn per input set), ``model`` and the reset seed
    pin an instance (the seed draws the batch of each input set; ``moe_align_block_size`` has no dtype to
    pin); ``min_speedup`` is the factor over the
    starting kernel that submit needs (default 2, the task's ``improvement_threshold`` + 1); ``auto_bench``
    (off by default) measures after every change of ``kernel.py``; ``sandbox`` picks the backend; the rest
    are `RsiEnv`'s.

    ## Action Space

    DESIGN.md's ``Dict``. There are no engine flags: flag actions are masked and refused. Edit
    ``kernel.py`` (``old == ""`` writes it whole); shell commands run in the episode's sandbox (which
    cannot see the harness or the references); bench measures; submit verifies.

    ## Observation Space

    The ``Dict`` of every ``RSI/*`` env; ``telemetry`` holds ``speedup_vs_reference``,
    ``speedup_vs_start``, ``correct`` (1/0), ``kernel_ms`` and ``reference_ms`` (per call, averaged over the
    timed shapes) of the last measurement; ``config`` and ``flag_mask`` are one constant 0; ``text`` the
    measurement (per shape) or the kernel's error.

    ## Rewards

    Continuous: the log speedup over PyTorch eager, paid only for new bests above eager's 0 (as every
    ``RSI/*`` env pays gains over its reference), minus each measurement's timed seconds x 0.001.
    Binary, on submit: +1 if the kernel is correct on three fresh input sets (seeds the benches never
    used) and at least ``min_speedup`` times as fast as the starting kernel on the same sets (both
    measured against eager in their own runs, so the machine's load cancels out of the ratio).

    Timings are not reproducible: the harness takes the fastest of five interleaved blocks per side
    (noise only adds time), and each measurement is cached by the kernel's text, op, dtype, seeds, device,
    model, backend and harness files, for the process's life. So an unchanged kernel is never re-timed
    (re-benchmarking cannot re-roll noise), a seeded episode gives the same observations and rewards
    when replayed in the same process (the registry's determinism check), and correctness verdicts,
    shapes and inputs are deterministic everywhere; across processes or machines only the timed
    numbers move. The binary threshold (2x the start) sits far from the reference solution's margins
    (``rsi_env/tasks/kernel/reference.py``, hidden; docs/kernel.md lists them per op and dtype).

    ## Starting State

    ``kernel.py`` = the naive kernel. It is measured beside the first bench whose kernel measures correct (its
    speedup over eager is the start of ``speedup_vs_start``) and again on the submission's inputs at submit,
    each time after the agent's kernel and outside the step's 15 s for the agent's code (it is trusted); a
    reset measures nothing.

    ## Episode End

    Terminates on submit; truncates after ``max_steps`` (30) steps. At most 20 measurements.

    ## Version History

    * v1: four more ops (``reshape_and_cache``, ``dynamic_per_token_scaled_fp8_quant``, ``moe_sum``,
      ``moe_align_block_size``); ``dtype=`` pins the dtype; the starting ``silu_and_mul`` and
      ``rms_norm_residual`` loop over 1024-element passes of each row, as the CUDA kernels' threads do (v0's
      loop over rows left the reference solution only 2.4-4x ahead of them on a loaded two-core machine, too
      near the 2x that passes); five timed blocks a side instead of seven (a measurement must fit the step's
      15 s on a loaded machine). The four ops of v0 draw the same shapes and inputs.
    * v0: first release (`KernelEnvV0`).
    """

    task_id = "RSI/Kernel-v1"
    ops: tuple[str, ...] = OPS
    template_dirs: tuple[Path, ...] = (TEMPLATES,)   # where the starting kernel is looked for, first found wins
    pins_dtype = True
    timing_rounds = 5   # interleaved blocks a side; the fastest counts
    promotable = False  # no engine configuration to promote
    sandboxed = True
    measures_engine = False  # no workloads, no engine flags: a reset measures nothing
    bench_at_submit = False  # submit measures on its own seeds, which no bench has used
    verify_again = True
    telemetry_fields = KERNEL_FIELDS

    def __init__(self, task: Task | str | None = None, *, op: str = "rms_norm_residual", dtype: str | None = None,
                 tier: str = "sim", model: str | None = None, max_steps: int | None = None,
                 auto_bench: bool | None = None, seed: int | None = None, max_measurements: int | None = None,
                 min_speedup: float | None = None, sandbox: str = "auto", shell_timeout_s: float = 10.0,
                 render_mode: str | None = None) -> None:
        base = task if isinstance(task, Task) else load_task(task or self.task_id)
        if KERNEL_FILE not in base.editable_files:
            raise RsiEnvError(f"{base.id}: the task must list {KERNEL_FILE} in editable_files")
        if op not in self.ops:
            later = " (a later version of the task has it)" if op in OPS else ""
            raise RsiEnvError(f"unknown op {op!r} for {base.id}{later}; known: {', '.join(self.ops)}")
        if dtype is not None and not self.pins_dtype:
            raise RsiEnvError(f"{base.id} draws the dtype per input set; RSI/Kernel-v1 pins it with dtype=")
        check_dtype(op, dtype)
        if tier not in ("sim", "real"):
            raise RsiEnvError(f"unknown tier {tier!r}: use 'sim' (CPU timing) or 'real' (CUDA)")
        if tier == "real":
            _require_cuda()
        # The arguments a replay passes back (RsiEnv's engine arguments are not this env's).
        args: dict[str, Any] = {"op": op, "dtype": dtype} if self.pins_dtype else {"op": op}
        RecordConstructorArgs.__init__(self, **args, tier=tier, model=model, max_steps=max_steps,
                                       auto_bench=auto_bench, seed=seed, max_measurements=max_measurements,
                                       min_speedup=min_speedup, sandbox=sandbox, shell_timeout_s=shell_timeout_s)
        self.op, self.dtype = op, dtype
        self.device = "cuda" if tier == "real" else "cpu"
        self.model_name = model or base.default_model
        self.sizes = model_sizes(self.model_name)
        self.template = next(d / f"{op}.py" for d in self.template_dirs if (d / f"{op}.py").exists()).read_text()
        self.start: KernelResult | None = None
        self.last: KernelResult | None = None
        self._submit_start: KernelResult | None = None  # the starting kernel on the submission's seeds
        super().__init__(base, tier=tier, model=model, max_steps=max_steps, auto_bench=bool(auto_bench), seed=seed,
                         max_measurements=max_measurements or None, shell_timeout_s=shell_timeout_s, sandbox=sandbox,
                         render_mode=render_mode)
        if self.device == "cuda":  # a GPU kernel's first call compiles it: the harness's own timeout is the step's
            self.action_timeout_s = HARNESS_TIMEOUT_S
        self.min_speedup = float(min_speedup if min_speedup is not None else 1.0 + self.task.improvement_threshold)

    def _make_tier(self, tier: str, engine_version: str) -> Tier:
        self.kernel_tier = KernelTier(self.op, self.sizes, self.device, self.sandbox_backend, TIMED_SHAPES, self.dtype,
                                      self.timing_rounds)
        return self.kernel_tier

    # ---- measuring ----------------------------------------------------------------------------------
    def seeds(self, submit: bool = False) -> list[int]:
        """The check seeds of this episode's benches (or of its submission, which the benches never see)."""
        base = (self.episode_seed or 0) * CHECK_SEEDS + (_SUBMIT_SEED_OFFSET if submit else 0)
        return [base + k for k in range(CHECK_SEEDS)]

    def measure(self, source: str, submit: bool = False) -> KernelResult:
        """Check and time ``source`` on this episode's seeds, in a fresh sandbox."""
        return self.kernel_tier.measure(source, self.seeds(submit))

    def _episode_extra(self) -> dict[str, Any]:
        return {"op": self.op, "dtype": self.dtype, "model": self.model_name, "tier": self.tier_name,
                "device": self.device}

    def sandbox_profile(self) -> Profile:
        """The agent's shell sees what the harness's sandbox does: torch and numpy (and the GPU on the real tier)."""
        return kernel_profile(self.device)

    def kernel_source(self) -> str:
        assert self.workspace is not None
        return self.workspace.read(KERNEL_FILE)

    # ---- the episode ------------------------------------------------------------------------------------
    def _begin_episode(self, seed: int) -> None:
        self.start = self.last = self._submit_start = None  # measured with the first bench: a reset costs none

    def _workspace_files(self) -> dict[str, str]:
        return {KERNEL_FILE: self.template}

    def _after_baseline(self) -> None:
        self.text = clean(f"{self.task.id} ({self.op}{self._dtype_note()}, tier {self.tier_name}): {self.task.summary}\n"
                          f"{KERNEL_FILE} holds the starting kernel; its docstring states the contract.")

    # ---- actions ----------------------------------------------------------------------------------------
    def _code_state(self) -> str | None:
        return self._source()

    def _source(self) -> str | None:
        try:
            return self.kernel_source()
        except EditError:
            return None

    def _measure(self, verify: bool) -> Measurement:
        """The workspace's kernel on the benches' seeds, or on submit's; then the starting kernel on the same seeds.

        The starting kernel is timed only beside a kernel that measured well (there is no speedup over it to
        compare otherwise, and a kernel that hangs then costs its step no more), and outside the step's deadline
        for the agent's code: it is ours, and a loaded machine must not starve it of what the agent's kernel left.
        """
        result = self.last = self._measure_workspace(submit=verify)
        if verify:
            self._submit_start = self._measure_start(submit=True) if result.ok else None
            return Measurement(result.score, result.device_seconds, result.summary())
        if self.start is None and result.ok:
            self.start = self._measure_start(submit=False)
        if self.start is None:
            start = "starting kernel not measured yet (it is, beside the first kernel that measures correct)"
        elif self.start.ok and self.start.speedup:
            start = f"starting kernel {self.start.speedup:.2f}x eager"
        else:
            start = f"starting kernel not measured: {self.start.error}"
        return Measurement(result.score, result.device_seconds, f"{start}; {result.summary()}")

    def _measure_start(self, submit: bool) -> KernelResult:
        with untimed():
            return self.measure(self.template, submit=submit)

    def _measure_workspace(self, submit: bool) -> KernelResult:
        source = self._source()
        if source is None:
            return KernelResult(False, None, f"{KERNEL_FILE} is missing or unreadable; write it again with an "
                                             "edit (old='')")
        return self.measure(source, submit=submit)

    def _verify_charge(self, m: Measurement, stale: bool) -> float:
        return m.device_s  # the submission's own seeds: always a new measurement

    def _guards(self) -> list[GuardResult]:
        """Correct on the submission's fresh inputs, and ``min_speedup`` times the starting kernel on them."""
        result, start = self.last, self._submit_start
        assert result is not None
        gain = (result.speedup / start.speedup if start is not None and start.ok and start.speedup and result.speedup
                else 0.0)
        return [GuardResult("correct", result.correct, "" if result.correct else str(result.error)),
                GuardResult("speedup", result.ok and gain >= self.min_speedup,
                            f"{gain:.2f}x the starting kernel vs required {self.min_speedup:.2f}x")]

    # ---- observation ------------------------------------------------------------------------------------
    def _telemetry_obs(self) -> np.ndarray:
        tel = np.zeros(len(KERNEL_FIELDS), dtype=np.float32)
        r = self.last
        if r is not None and r.ok and r.speedup is not None:
            tel[0] = r.speedup
            if self.start is not None and self.start.ok and self.start.speedup:
                tel[1] = r.speedup / self.start.speedup
            tel[2] = 1.0
            tel[3] = float(np.mean([t["candidate_s"] for t in r.timings])) * 1e3
            tel[4] = float(np.mean([t["reference_s"] for t in r.timings])) * 1e3
        return tel

    def _info(self) -> dict[str, Any]:
        r = self.last
        return {"task": self.task.id, "op": self.op, "dtype": self.dtype, "score": self.last_score,
                "best_score": self.best_score,
                "measurements": self.measurements, "steps": self.steps, "sandbox": self.sandbox_backend,
                "correct": None if r is None else r.correct, "speedup": None if r is None else r.speedup,
                "verdict": self._verdict_info()}

    def _dtype_note(self) -> str:
        return f", {self.dtype}" if self.dtype else ""

    def _task_text(self) -> str:
        return (f"# {self.task.id}: {self.op}\n\n{self.task.summary}\n\nEdit {KERNEL_FILE}; its docstring states "
                f"the contract. Shapes: {self.model_name}'s sizes {self.sizes}, a batch drawn per seed, "
                f"{'dtype ' + self.dtype if self.dtype else 'a dtype drawn per seed'}. "
                f"Device: {self.device}. Submit passes when the kernel is correct on fresh inputs and "
                f"{self.min_speedup:.2f}x as fast as the starting kernel.\n")


class KernelEnvV0(KernelEnv):
    """RSI/Kernel-v0: `KernelEnv` (RSI/Kernel-v1) with its first four ops and the dtype always drawn per input set.

    ``op`` is ``rms_norm_residual``, ``silu_and_mul``, ``rotary_embedding`` or ``paged_attention_decode``;
    ``dtype=`` is refused (v1 pins it). The shapes, inputs and checks are v1's for these ops; the starting
    kernels are v0's (``templates/v0/``: one Python iteration per token or sequence), and the harness takes
    the fastest of seven interleaved blocks a side. A bench measures the kernel against PyTorch eager; the
    continuous reward is the log speedup,
    minus each measurement's timed seconds x 0.001; submit pays +1 when correct on three fresh input sets
    and 2x as fast as the starting kernel. Terminates on submit; truncates after ``max_steps`` (30) steps.
    At most 20 measurements.

    ## Version History

    * v0: first release.
    """

    task_id = "RSI/Kernel-v0"
    ops = V0_OPS
    template_dirs = (TEMPLATES / "v0", TEMPLATES)
    pins_dtype = False
    timing_rounds = 7


def _require_cuda() -> None:
    """Refuse the real tier where this machine has no CUDA device, saying so."""
    try:
        import torch
    except ImportError:
        raise RsiEnvError("tier='real' of RSI/Kernel needs torch with CUDA; torch is not installed") from None
    if not torch.cuda.is_available():
        raise RsiEnvError(f"tier='real' of RSI/Kernel times kernels on CUDA, but torch {torch.__version__} sees "
                          "no CUDA device here; run it on a GPU machine (the sandbox binds /dev/nvidia*), or "
                          "use tier='sim' (CPU timing)")
