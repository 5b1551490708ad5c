"""Per-GPU memory estimate of a training job, from ``config.json`` and the run's parameters.

The model (what each component counts, the formulas and their sources) is documented in
docs/estimate.md. Summary: static memory (weights, gradients, optimizer states, LoRA adapters,
OSFT's SVD factors, a reference model) is exact for the stated precision and sharding and is
validated against real tensors in tests; dynamic memory (activations, logits, the generation KV
cache) is a per-token model whose uncertainty the low/high bounds carry.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from thub.errors import UsageError
from thub.insight.architecture import Linear, ModelFacts, lora_params, lora_targets

if TYPE_CHECKING:
    from thub.specs import MemoryPolicy

GIB = 1024**3
SUPPORTED = ("sft", "osft", "lora_sft", "grpo", "lora_grpo", "dpo", "kto")
#: Preference tuning: a frozen reference model beside the policy, unless the loss is reference-free.
PREFERENCE = ("dpo", "kto")
#: Sequences one sample is trained as in one forward: a DPO pair is its chosen and its rejected answer.
SEQUENCES_PER_SAMPLE = {"dpo": 2}
SHARDINGS = ("auto", "ddp", "zero1", "zero2", "zero3", "fsdp")
PRECISIONS = ("auto", "bf16-mixed", "bf16", "fp32")  # auto: the backend's memory policy, else bf16-mixed
# Dynamic memory is a model, not a measurement: low/high bounds around it.
DYNAMIC_LOW, DYNAMIC_HIGH = 0.8, 1.35
# Allocator fragmentation and the CUDA context/workspaces on top of what tensors use.
OVERHEAD_HIGH_FRACTION, OVERHEAD_HIGH_BYTES = 0.08, 1 * GIB
DEFAULT_PROMPT_TOKENS = 256


@dataclass(frozen=True)
class Component:
    """One line of the breakdown. ``phase``: static, train (forward/backward) or generate."""

    name: str
    bytes: int
    phase: str
    note: str = ""


@dataclass
class Setup:
    """Everything the estimate depends on besides the model."""

    algorithm: str
    gpus: int = 1
    gpu_memory: int = 80 * GIB
    sharding: str = "auto"
    precision: str = "bf16-mixed"
    tokens_per_gpu: int = 0
    gradient_checkpointing: bool = False
    fused_loss: bool = False
    lora_rank: int = 16
    lora_dropout: float = 0.0
    target_modules: list[str] | None = None
    quant_bits: int | None = None  # 4 or 8 for QLoRA / 8-bit LoRA
    double_quant: bool = False
    unfreeze_rank_ratio: float = 0.25
    completions_per_gpu: int = 0
    prompt_tokens: int = DEFAULT_PROMPT_TOKENS
    completion_tokens: int = 0
    reference_model: bool = False  # GRPO with a KL term, DPO/KTO with a reference-based loss
    rollout_fraction: float | None = None
    memory_policy: MemoryPolicy | None = None  # the backend's policy applied; None: the generic training loop
    assumptions: list[str] = field(default_factory=list)

    @property
    def policy(self) -> str | None:
        """The applied memory policy's one-line summary (None: the generic training loop)."""
        return self.memory_policy.summary if self.memory_policy is not None else None

    @property
    def checkpoint_offload(self) -> bool:
        """Whether checkpointed layer inputs live in CPU memory (unsloth's offloaded checkpointing)."""
        return bool(self.gradient_checkpointing and self.memory_policy is not None
                    and self.memory_policy.checkpointing == "offloaded")

    @property
    def lora(self) -> bool:
        return self.algorithm.startswith("lora_")

    @property
    def grpo(self) -> bool:
        return self.algorithm.endswith("grpo")

    @property
    def preference(self) -> bool:
        """DPO or KTO: trained against a frozen reference model (reference-free losses aside)."""
        return self.algorithm in PREFERENCE

    def resolved_sharding(self) -> str:
        if self.sharding != "auto":
            return "fsdp" if self.sharding == "zero3" else self.sharding
        if self.gpus == 1 or self.lora:
            return "ddp"
        return "fsdp"


@dataclass
class Estimate:
    """Low / expected / high bytes per GPU with the breakdown and a verdict."""

    facts: ModelFacts
    setup: Setup
    components: list[Component]
    trainable_params: int
    low: int
    expected: int
    high: int
    verdict: str
    headroom: int  # gpu_memory - high when it fits, gpu_memory - expected otherwise (negative: shortfall)
    advice: list[str]

    def as_dict(self) -> dict[str, Any]:
        setup = self.setup
        return {
            "schema_version": 1,
            "algorithm": setup.algorithm,
            "model": self.facts.as_dict(),
            "setup": {
                "gpus": setup.gpus, "gpu_memory": setup.gpu_memory, "sharding": setup.resolved_sharding(),
                "precision": setup.precision, "tokens_per_gpu": setup.tokens_per_gpu,
                "gradient_checkpointing": setup.gradient_checkpointing, "fused_loss": setup.fused_loss,
                "lora_rank": setup.lora_rank if setup.lora else None,
                "quant_bits": setup.quant_bits if setup.lora else None,
                "unfreeze_rank_ratio": setup.unfreeze_rank_ratio if setup.algorithm == "osft" else None,
                "completions_per_gpu": setup.completions_per_gpu if setup.grpo else None,
                "reference_model": setup.reference_model if setup.grpo or setup.preference else None,
                "checkpoint_offload": setup.checkpoint_offload,
            },
            "memory_policy": setup.policy,
            "trainable_params": self.trainable_params,
            "components": [{"name": c.name, "bytes": c.bytes, "phase": c.phase, "note": c.note}
                           for c in self.components],
            "bytes_per_gpu": {"low": self.low, "expected": self.expected, "high": self.high},
            "verdict": self.verdict,
            "headroom_bytes": self.headroom,
            "advice": self.advice,
            "assumptions": list(setup.assumptions),
        }


def parse_size(text: str | int | float) -> int:
    """``80GiB``, ``80GB`` (decimal), ``81920MiB``, ``85899345920`` -> bytes; a bare number < 4096 is GiB."""
    if isinstance(text, (int, float)):
        value = float(text)
        return int(value * GIB) if value < 4096 else int(value)
    raw = text.strip().replace(" ", "")
    units = {"tib": 1024**4, "gib": GIB, "mib": 1024**2, "kib": 1024, "tb": 10**12, "gb": 10**9,
             "mb": 10**6, "kb": 10**3, "t": 1024**4, "g": GIB, "m": 1024**2, "k": 1024, "b": 1}
    lower = raw.lower()
    for unit, factor in units.items():  # noqa: B007 - factor is read after the break
        if lower.endswith(unit):
            number = lower[: -len(unit)]
            break
    else:
        number, factor = lower, 0
    try:
        value = float(number)
    except ValueError:
        raise UsageError(f"--gpu-memory {text!r}: expected a size such as 80GiB, 141GB or 24576MiB") from None
    if value <= 0:
        raise UsageError(f"--gpu-memory {text!r}: must be positive")
    if not factor:
        factor = GIB if value < 4096 else 1
    return int(value * factor)


def format_bytes(n: float) -> str:
    """Binary units with three significant figures (``12.3 GiB``); negative values keep their sign."""
    sign, n = ("-" if n < 0 else ""), abs(n)
    for unit, size in (("TiB", 1024**4), ("GiB", GIB), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= size:
            return f"{sign}{n / size:.3g} {unit}"
    return f"{sign}{int(n)} B"


def _shards(sharding: str, gpus: int) -> tuple[int, int, int]:
    """Divisors of (weights, gradients, optimizer states) for a sharding strategy."""
    g = max(gpus, 1)
    return {"ddp": (1, 1, 1), "zero1": (1, 1, g), "zero2": (1, g, g), "fsdp": (g, g, g)}[sharding]


def _bytes_per(precision: str) -> tuple[int, int]:
    """(stored weight bytes, activation bytes) per element."""
    return {"bf16-mixed": (4, 2), "bf16": (2, 2), "fp32": (4, 4)}[precision]


def _layer_elements(facts: ModelFacts) -> int:
    """Activation elements saved for backward per token per decoder layer (no recomputation).

    Norm inputs and outputs, q/k/v before and after rotary embeddings, the attention output
    (flash/SDPA attention: no seq x seq scores kept), and the gated MLP's four intermediate tensors
    over the experts a token is routed to (plus shared experts).
    """
    h, q, kv = facts.hidden_size, facts.q_dim, facts.kv_dim
    mlp = 4 * _active_mlp_width(facts)
    return 4 * h + 3 * q + 3 * kv + mlp


def _active_mlp_width(facts: ModelFacts) -> int:
    widths = 0
    for lin in facts.linears:
        if lin.name in ("mlp.up_proj", "mlp.shared_expert.up_proj"):
            widths += lin.rows * lin.count
        elif lin.name == "mlp.experts.up":
            widths += lin.rows * lin.count * facts.experts_per_token // max(facts.num_experts, 1)
    return max(widths // max(facts.num_layers, 1), 1)


def _logits_bytes(facts: ModelFacts, tokens: int, act: int, fused: bool) -> tuple[int, str]:
    v, h = facts.vocab_size, facts.hidden_size
    if fused:
        # Liger's fused linear cross-entropy: logits exist one chunk at a time (fp32 logits + grad)
        chunk = 2 ** math.ceil(math.log2(max(1, math.ceil(tokens / max(1, math.ceil(v / h))))))
        return min(chunk, tokens) * v * 4 * 2 + tokens * h * 4, "fused/chunked loss: one chunk of fp32 logits + grad"
    upcast = 4 if act != 4 else 0
    return tokens * v * (act + upcast + 4), "logits, fp32 upcast for the loss, log-softmax / its gradient"


def _osft_sizes(facts: ModelFacts, targets: list[Linear]) -> int:
    """Elements of the full SVD factors U (m x k), S (k), V (k x n), k = min(m, n), of ``targets``."""
    return sum((lin.rows * min(lin.rows, lin.cols) + min(lin.rows, lin.cols) + min(lin.rows, lin.cols) * lin.cols)
               * lin.count for lin in targets)


def estimate(facts: ModelFacts, setup: Setup, *, advise: bool = True) -> Estimate:
    """Compute the per-GPU estimate for ``setup`` on the model ``facts`` (``advise``: what to change)."""
    if setup.algorithm not in SUPPORTED:
        raise UsageError(f"thub estimate cannot size algorithm {setup.algorithm!r}; it sizes {', '.join(SUPPORTED)}")
    if setup.tokens_per_gpu < 1:
        raise UsageError("tokens per GPU is unknown: set max_tokens_per_gpu, or max_seq_len (and effective_batch_size)")
    sharding = setup.resolved_sharding()
    w_shard, g_shard, o_shard = _shards(sharding, setup.gpus)
    stored, act = _bytes_per(setup.precision)
    total = facts.total_params
    parts: list[Component] = []
    shard_note = f"{sharding}, {setup.gpus} GPU(s)"

    if setup.lora:
        adapters = lora_params(facts, setup.lora_rank, setup.target_modules)
        trainable = adapters
        targets = lora_targets(facts, setup.target_modules)
        if setup.quant_bits:
            quantised = sum(lin.numel for lin in facts.linears)  # every linear layer of the blocks
            per = 0.5 if setup.quant_bits == 4 else 1.0
            scales = (1 / 64) * (1 + 4 / 256) if setup.double_quant else 4 / 64  # absmax per 64-block
            base = quantised * (per + (scales if setup.quant_bits == 4 else 4 / max(facts.hidden_size, 1)))
            base += (total - quantised) * act
            base_note = f"{setup.quant_bits}-bit linear layers, the rest in {act * 8}-bit"
        else:
            base = total * act
            base_note = f"frozen, {act * 8}-bit"
        parts.append(Component("base weights", int(base / w_shard), "static", base_note))
        parts.append(Component("adapter weights", adapters * 4 // w_shard, "static",
                               f"{adapters:,} LoRA params (r={setup.lora_rank}, {len(targets)} matrix kinds), fp32"))
        parts.append(Component("gradients", adapters * 4 // g_shard, "static", "adapters only, fp32"))
        parts.append(Component("optimizer states", adapters * 8 // o_shard, "static",
                               "AdamW exp_avg + exp_avg_sq, fp32"))
    elif setup.algorithm == "osft":
        targets = lora_targets(facts, None)
        target_numel = sum(lin.numel for lin in targets)
        svd = _osft_sizes(facts, targets)
        other = total - target_numel
        trainable = int(svd * setup.unfreeze_rank_ratio) + other
        parts.append(Component("weights", (svd * 4 + other * stored) // w_shard, "static",
                               f"fp32 SVD factors of {len(targets)} matrix kinds + other weights; {shard_note}"))
        parts.append(Component("gradients", trainable * 4 // g_shard, "static",
                               f"unfrozen subspace (ratio {setup.unfreeze_rank_ratio}) + non-target weights, fp32"))
        parts.append(Component("optimizer states", trainable * 8 // o_shard, "static", "AdamW, fp32"))
    else:
        trainable = total
        parts.append(Component("weights", total * stored // w_shard, "static",
                               f"{total:,} params, {stored * 8}-bit stored; {shard_note}"))
        parts.append(Component("gradients", total * stored // g_shard, "static", f"{stored * 8}-bit"))
        parts.append(Component("optimizer states", total * 2 * stored // o_shard, "static",
                               f"AdamW exp_avg + exp_avg_sq, {stored * 8}-bit"))

    if sharding == "fsdp" and setup.gpus > 1:
        layer = (total - facts.components.get("embeddings", 0) - facts.components.get("lm_head", 0)) // facts.num_layers
        unit = max(layer, facts.vocab_size * facts.hidden_size)
        parts.append(Component("gathered FSDP unit", unit * act * 2, "train",
                               "largest unit unsharded for compute, with prefetch of the next"))
    if setup.grpo and setup.reference_model and not setup.lora:
        parts.append(Component("reference model", total * act // w_shard, "static", "frozen copy for the KL term"))
    if setup.preference and setup.reference_model:
        # A library that loads the policy in the checkpoint's dtype loads the reference so too (TRL:
        # the policy's dtype); otherwise it is loaded in the compute dtype, with no master copy.
        width = stored if setup.memory_policy is not None and setup.memory_policy.precision == "checkpoint" else act
        parts.append(Component("reference model", total * width // w_shard, "static",
                               f"frozen, {width * 8}-bit, no gradients or optimizer states; sharded like the weights"))

    tokens = setup.tokens_per_gpu
    per_layer = _layer_elements(facts)
    if setup.gradient_checkpointing and setup.checkpoint_offload:
        activations = tokens * (facts.hidden_size + per_layer) * act
        act_note = "checkpointed layer inputs offloaded to CPU memory; one layer recomputed on the GPU"
    elif setup.gradient_checkpointing:
        activations = tokens * (facts.num_layers * facts.hidden_size + per_layer) * act
        act_note = "checkpointed layer inputs + one layer recomputed"
    else:
        activations = tokens * facts.num_layers * per_layer * act
        act_note = f"{per_layer:,} elements per token per layer"
    activations += tokens * facts.hidden_size * act * 2  # embeddings output, final norm
    if setup.lora:
        lora_act = sum(lin.count * setup.lora_rank for lin in lora_targets(facts, setup.target_modules))
        if setup.lora_dropout:
            lora_act += sum(lin.count * lin.cols for lin in lora_targets(facts, setup.target_modules))
        activations += tokens * lora_act * act
    parts.append(Component("activations", activations, "train", f"{tokens:,} tokens per GPU; {act_note}"))
    logit_tokens = setup.completions_per_gpu * setup.completion_tokens if setup.grpo else tokens
    logits, logits_note = _logits_bytes(facts, logit_tokens, act, setup.fused_loss)
    parts.append(Component("logits", logits, "train", logits_note))
    if setup.grpo:
        if setup.rollout_fraction:
            parts.append(Component("rollout engine", int(setup.rollout_fraction * setup.gpu_memory), "static",
                                   "co-located vLLM reserve (gpu_memory_utilization)"))
        else:
            kv = (2 * facts.num_layers * facts.kv_dim * act * setup.completions_per_gpu
                  * (setup.prompt_tokens + setup.completion_tokens))
            gen_logits = setup.completions_per_gpu * facts.vocab_size * 4
            parts.append(Component("generation KV cache", kv + gen_logits, "generate",
                                   f"{setup.completions_per_gpu} completions x "
                                   f"{setup.prompt_tokens + setup.completion_tokens} tokens"))

    static = sum(c.bytes for c in parts if c.phase == "static")
    train = sum(c.bytes for c in parts if c.phase == "train")
    generate = sum(c.bytes for c in parts if c.phase == "generate")
    dynamic = max(train, generate)
    expected = static + dynamic
    low = static + int(dynamic * DYNAMIC_LOW)
    high = int((static + dynamic * DYNAMIC_HIGH) * (1 + OVERHEAD_HIGH_FRACTION)) + OVERHEAD_HIGH_BYTES
    verdict, headroom = _verdict(low, expected, high, setup.gpu_memory)
    result = Estimate(facts, setup, parts, trainable, low, expected, high, verdict, headroom, [])
    if advise:
        result.advice = _advice(result, facts)
    return result


def _verdict(low: int, expected: int, high: int, memory: int) -> tuple[str, int]:
    if high <= memory:
        return "fits", memory - high
    if expected <= memory:
        return "tight", memory - expected
    if low <= memory:
        return "unlikely", memory - expected
    return "does not fit", memory - low


def _advice(result: Estimate, facts: ModelFacts) -> list[str]:
    """What to change when the job does not fit comfortably."""
    if result.verdict == "fits":
        return []
    setup, advice = result.setup, []
    by_name = {c.name: c.bytes for c in result.components}
    if not setup.gradient_checkpointing and by_name.get("activations", 0) > 0.2 * result.expected:
        kept = setup.tokens_per_gpu * (facts.num_layers * facts.hidden_size + _layer_elements(facts))
        saved = by_name["activations"] - kept * _bytes_per(setup.precision)[1]
        advice.append(f"enable gradient checkpointing (--gradient-checkpointing): saves about {format_bytes(saved)}")
    if not setup.fused_loss and by_name.get("logits", 0) > 0.1 * result.expected:
        advice.append("use a fused/chunked loss (--use-liger where the backend honours it): logits take "
                      f"{format_bytes(by_name['logits'])}")
    if setup.tokens_per_gpu > 512:
        target = result.setup.gpu_memory
        dynamic = by_name.get("activations", 0) + by_name.get("logits", 0)
        static = result.expected - dynamic
        if dynamic and static < target:
            fitting = int(setup.tokens_per_gpu * (target - static) / (dynamic * DYNAMIC_HIGH) * 0.9)
            if 0 < fitting < setup.tokens_per_gpu:
                advice.append(f"lower tokens per GPU to about {fitting:,} (--max-tokens-per-gpu), now "
                              f"{setup.tokens_per_gpu:,}")
    if setup.resolved_sharding() != "fsdp" and setup.gpus > 1:
        advice.append("shard weights, gradients and optimizer states across GPUs (--sharding fsdp)")
    more = _gpus_needed(result, facts)
    if more and more > setup.gpus:
        advice.append(f"use {more} GPUs with FSDP full sharding (now {setup.gpus})")
    elif more is None:
        advice.append("more GPUs alone do not make it fit: activations and logits are per GPU, so lower the "
                      "tokens per GPU or recompute activations, or train LoRA/QLoRA")
    return advice


def _gpus_needed(result: Estimate, facts: ModelFacts) -> int | None:
    from dataclasses import replace

    setup = result.setup
    gpus = max(setup.gpus, 1)
    while gpus <= 1024:
        gpus *= 2
        trial = estimate(facts, replace(setup, gpus=gpus, sharding="fsdp", assumptions=[]), advise=False)
        if trial.high <= setup.gpu_memory:
            return gpus
    return None


def setup_from_params(
    algorithm: str,
    params: dict[str, Any],
    *,
    gpus: int,
    gpu_memory: int,
    sharding: str = "auto",
    precision: str = "auto",
    policy: Any = None,
    facts: ModelFacts | None = None,
    reference_model: bool | None = None,
) -> Setup:
    """Turn an algorithm's resolved parameter values into a :class:`Setup`, recording assumptions.

    ``policy`` is the backend's :class:`~thub.specs.MemoryPolicy` (what its library does whatever
    the parameters say: checkpointing, dtypes, loss path, sharding, rollout engine); ``facts``
    give the checkpoint's dtype for ``precision="checkpoint"`` policies. ``reference_model``: whether
    the algorithm's parameters load a frozen reference model (the parameter model says, e.g. DPO's
    reference-free losses load none); None: GRPO with ``beta`` > 0, DPO and KTO always.
    """
    from thub.runner.batching import split_batch

    setup = Setup(algorithm=algorithm, gpus=gpus, gpu_memory=gpu_memory, sharding=sharding,
                  precision=precision if precision != "auto" else "bf16-mixed",
                  gradient_checkpointing=bool(params.get("gradient_checkpointing")),
                  fused_loss=bool(params.get("use_liger")))
    notes = setup.assumptions
    if policy is not None:
        _apply_policy(setup, policy, params, precision, facts)
    if setup.lora:
        setup.lora_rank = int(params.get("lora_r") or 16)
        setup.lora_dropout = float(params.get("lora_dropout") or 0.0)
        setup.target_modules = params.get("target_modules") or None
        setup.quant_bits = 4 if params.get("load_in_4bit") else 8 if params.get("load_in_8bit") else None
        setup.double_quant = bool(params.get("bnb_4bit_use_double_quant"))
        if setup.target_modules is None:
            notes.append("LoRA targets: every linear layer of the blocks (PEFT all-linear)")
    if algorithm == "osft":
        setup.unfreeze_rank_ratio = float(params.get("unfreeze_rank_ratio") or 0.25)
        if not params.get("target_patterns"):
            notes.append("OSFT targets: attention and MLP projections")
    if setup.grpo:
        prompts = int(params.get("prompt_batch_size") or 1)
        group = int(params.get("group_size") or 8)
        setup.completions_per_gpu = max(1, math.ceil(prompts * group / gpus))
        setup.completion_tokens = int(params.get("max_tokens") or 512)
        if params.get("max_prompt_length"):
            setup.prompt_tokens = int(params["max_prompt_length"])
        else:
            notes.append(f"prompt length {DEFAULT_PROMPT_TOKENS} tokens (set max_prompt_length)")
        setup.reference_model = bool(params.get("beta")) if reference_model is None else reference_model
        setup.rollout_fraction = params.get("gpu_memory_utilization")
        if policy is not None and policy.rollout == "in-process":
            setup.rollout_fraction = None  # generation with the training model: KV cache only
        setup.tokens_per_gpu = setup.completions_per_gpu * (setup.prompt_tokens + setup.completion_tokens)
        return setup
    if setup.preference:
        setup.reference_model = True if reference_model is None else reference_model
    seq = params.get("block_size") if params.get("is_pretraining") else params.get("max_seq_len")
    sequences = SEQUENCES_PER_SAMPLE.get(algorithm, 1)
    if sequences > 1:
        notes.append(f"{sequences} sequences per sample (chosen and rejected in one forward)")
    if params.get("max_tokens_per_gpu"):
        setup.tokens_per_gpu = int(params["max_tokens_per_gpu"])
        if seq:  # one sample always fits a micro-batch
            setup.tokens_per_gpu = max(setup.tokens_per_gpu, int(seq) * sequences)
    elif seq:
        micro = 1
        if params.get("effective_batch_size"):
            try:
                micro = split_batch(int(params["effective_batch_size"]), gpus, 8)[0]
            except UsageError:
                micro = max(1, min(8, int(params["effective_batch_size"]) // gpus))
        setup.tokens_per_gpu = micro * int(seq) * sequences
        notes.append(f"micro-batch of {micro} x {seq} tokens (padding to the longest sample; set max_tokens_per_gpu "
                     "for a token budget)")
    return setup


def _apply_policy(setup: Setup, policy: Any, params: dict[str, Any], precision: str, facts: ModelFacts | None) -> None:
    """Make ``setup`` what the backend's library really does (see :class:`thub.specs.MemoryPolicy`)."""
    setup.memory_policy = policy
    if policy.checkpointing == "always":
        setup.gradient_checkpointing = True
    elif policy.checkpointing == "offloaded":
        # unsloth-style: on unless the user turned checkpointing off explicitly
        setup.gradient_checkpointing = params.get("gradient_checkpointing") is not False
    elif policy.checkpointing == "unless-disabled":
        setup.gradient_checkpointing = params.get("gradient_checkpointing") is not False
    elif policy.checkpointing == "never":
        setup.gradient_checkpointing = False
    if precision == "auto" and policy.precision:
        if policy.precision == "checkpoint":
            stored = (facts.dtype if facts else None) or "float32"
            setup.precision = "bf16" if stored in ("bfloat16", "float16") else "bf16-mixed"
            setup.assumptions.append(f"weights trained in the checkpoint's dtype ({stored})")
        else:
            setup.precision = policy.precision
    if setup.sharding == "auto" and policy.sharding and not setup.lora:
        setup.sharding = policy.sharding
    if policy.loss == "fused":
        setup.fused_loss = True
    elif policy.loss == "upcast":
        setup.fused_loss = bool(params.get("use_liger")) and policy.liger_fuses_loss
    if setup.grpo and policy.rollout == "colocated" and not params.get("gpu_memory_utilization"):
        setup.assumptions.append("co-located inference engine: its gpu_memory_utilization is unknown, "
                                 "so its reserve is left out")
