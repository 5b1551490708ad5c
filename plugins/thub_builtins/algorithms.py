"""Built-in algorithm specs. Parameter models are named by import string (loaded lazily)."""

from __future__ import annotations

from collections.abc import Callable

from thub import hookimpl
from thub.specs import AlgorithmSpec

_PARAMS = "thub_builtins.params"
_PREFERENCE = "thub_builtins.preference_params"
# the data kinds each trains on (thub_builtins.data_kinds; preference kinds: thub_builtins.preference_data)
_CHAT = ("chat", "document", "processed")
_PROMPTS = ("grpo",)

ALGORITHMS = (
    AlgorithmSpec("sft", "Full supervised fine-tuning; continued pretraining with is_pretraining.",
                  f"{_PARAMS}:SFTParams", _CHAT),
    AlgorithmSpec("osft", "Orthogonal-subspace fine-tuning (continual learning without forgetting).",
                  f"{_PARAMS}:OSFTParams", _CHAT),
    AlgorithmSpec("lora_sft", "Supervised fine-tuning of LoRA/QLoRA adapters.", f"{_PARAMS}:LoRASFTParams", _CHAT),
    AlgorithmSpec("grpo", "Full-parameter GRPO with verifiable rewards.", f"{_PARAMS}:GRPOParams", _PROMPTS),
    AlgorithmSpec("lora_grpo", "GRPO training LoRA adapters.", f"{_PARAMS}:LoRAGRPOParams", _PROMPTS),
    AlgorithmSpec("dpo", "Direct preference optimisation on (prompt, chosen, rejected) pairs; losses sigmoid, ipo, "
                  "hinge, orpo, simpo.", f"{_PREFERENCE}:DPOParams", ("preference",)),
    AlgorithmSpec("kto", "Kahneman-Tversky optimisation on unpaired answers labelled desirable or undesirable.",
                  f"{_PREFERENCE}:KTOParams", ("unpaired_preference",)),
)


@hookimpl
def thub_register_algorithms(register: Callable[[AlgorithmSpec], None]) -> None:
    for spec in ALGORITHMS:
        register(spec)
