"""``thub eval --option KEY=VALUE`` for the lmeval evaluator: each a pydantic field (type, default,
bounds, help), so an unknown key, a wrong type or a key that means nothing for the chosen backend is
an error (exit 2), never dropped."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from thub.errors import UsageError, did_you_mean

#: Options only lm-eval's vLLM model reads.
VLLM_ONLY = ("gpu_memory_utilization", "tensor_parallel_size")


class LmevalOptions(BaseModel):
    """What ``--option`` may set for ``--evaluator lmeval``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: Literal["hf", "vllm"] = Field(
        "hf", description="lm-eval model: 'hf' (transformers, CPU or GPU) or 'vllm' (NVIDIA GPU, the [vllm] extra).")
    mode: Literal["loglikelihood", "generate"] = Field(
        "loglikelihood", description="Local JSONL tasks: score the answer's log-likelihood (acc = greedy, "
                                     "perplexity), or generate and compare (exact_match).")
    max_gen_toks: int = Field(
        64, gt=0, description="Local JSONL tasks in mode=generate: the most tokens generated per answer.")
    num_fewshot: int | None = Field(
        None, ge=0, description="Few-shot examples per prompt (lm-eval --num_fewshot); unset: each task's own.")
    gpu_memory_utilization: float | None = Field(
        None, gt=0, le=1, description="backend=vllm: the share of GPU memory vLLM may take (vLLM's default: 0.9).")
    tensor_parallel_size: int | None = Field(
        None, gt=0, description="backend=vllm: GPUs one model is split over (default 1).")

    @model_validator(mode="after")
    def _backend_fits(self) -> LmevalOptions:
        if "max_gen_toks" in self.model_fields_set and self.mode != "generate":
            raise ValueError("max_gen_toks only applies with mode=generate")
        if self.backend != "vllm":
            given = [name for name in VLLM_ONLY if getattr(self, name) is not None]
            if given:
                raise ValueError(f"{', '.join(given)} only apply with backend=vllm")
        return self


def parse_options(options: dict[str, Any]) -> LmevalOptions:
    """Validate ``EvalRequest.options``; UsageError (exit 2) naming the option and what it expects."""
    known = list(LmevalOptions.model_fields)
    for key in options:
        if key not in known:
            raise UsageError(f"--option {key}: not an lmeval option{did_you_mean(key, known)}; "
                             f"it takes {', '.join(known)}")
    try:
        return LmevalOptions(**options)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            where = ".".join(str(part) for part in error["loc"])
            found = f", found {error['input']!r}" if where else ""
            problems.append(f"--option {where}: {error['msg']}{found}" if where else f"--option: {error['msg']}")
        raise UsageError("; ".join(problems)) from None
