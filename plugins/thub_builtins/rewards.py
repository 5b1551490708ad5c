"""Built-in reward registrations (functions live in ``thub_builtins.reward_functions``)."""

from __future__ import annotations

from collections.abc import Callable

from thub import hookimpl
from thub.specs import RewardSpec

_FUNCTIONS = "thub_builtins.reward_functions"


@hookimpl
def thub_register_rewards(register: Callable[[RewardSpec], None]) -> None:
    register(RewardSpec("binary", f"{_FUNCTIONS}:binary",
                        "1 for an exact match, 0.5 if the answer is contained, else 0."))
    register(RewardSpec("math", f"{_FUNCTIONS}:math",
                        "1 when the final answer (boxed, <answer>, ####, last number) matches."))
    register(RewardSpec("tool_call", f"{_FUNCTIONS}:tool_call",
                        "1 for the right tool and arguments, 0.5 for the right tool only."))
