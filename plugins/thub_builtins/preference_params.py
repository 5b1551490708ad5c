"""Parameter models of preference tuning: ``dpo`` (paired: a prompt, a chosen and a rejected
answer) and ``kto`` (unpaired: a prompt, one answer and a desirable/undesirable label).

Each parameter is defined once, here; names follow TRL (``beta``, ``loss_type``,
``desirable_weight``) where LLaMA-Factory and axolotl have the same knob under another name
(``pref_beta``/``rl_beta``, ``pref_loss``/``rl``), so the translation per backend is a rename,
never a reinterpretation. ``max_seq_len`` bounds prompt + answer, as every backend counts it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from thub.params import BaseParams, param
from thub_builtins.params import OverlongMixin

__all__ = ["DPOParams", "KTOParams", "LOSSES_WITHOUT_REFERENCE", "PreferenceParams"]

#: Losses that compare the policy with itself only: no reference model is loaded for them.
LOSSES_WITHOUT_REFERENCE = frozenset({"orpo", "simpo"})


class PreferenceParams(OverlongMixin, BaseParams):
    """What DPO and KTO share: the reference model, beta and the prompt budget."""

    beta: float = param(0.1, group="preference", gt=0,
                        help="Strength of the implicit KL penalty against the reference model (TRL's beta, "
                             "LLaMA-Factory's pref_beta, axolotl's rl_beta).")
    reference_model_path: str | None = param(
        group="preference", path=True,
        help="The frozen reference model (default: a copy of the initial policy, model_path). Reference-free "
             "losses (orpo, simpo) load none.")

    @property
    def loads_reference_model(self) -> bool:
        """Whether training holds a frozen reference model (``thub estimate`` counts it): not for
        the reference-free losses."""
        return getattr(self, "loss_type", None) not in LOSSES_WITHOUT_REFERENCE


class DPOParams(PreferenceParams):
    """Direct preference optimisation on paired preferences (prompt, chosen, rejected)."""

    loss_type: Literal["sigmoid", "ipo", "hinge", "orpo", "simpo"] = param(
        "sigmoid", group="preference",
        help="Preference loss: sigmoid (DPO), ipo, hinge; orpo and simpo (reference-free) where the backend has "
             "them.")
    label_smoothing: float | None = param(group="preference", ge=0, lt=0.5,
                                          help="Conservative DPO: assumed probability that a label is flipped "
                                               "(sigmoid loss only).")
    simpo_gamma: float | None = param(group="preference", ge=0,
                                      help="SimPO's target reward margin (loss_type simpo only).")

    @model_validator(mode="after")
    def _loss_options(self) -> DPOParams:
        if self.simpo_gamma is not None and self.loss_type != "simpo":
            raise ValueError(f"simpo_gamma only applies with loss_type: simpo (found {self.loss_type})")
        if self.label_smoothing and self.loss_type != "sigmoid":
            raise ValueError(f"label_smoothing only applies with loss_type: sigmoid (found {self.loss_type})")
        if self.reference_model_path and self.loss_type in LOSSES_WITHOUT_REFERENCE:
            raise ValueError(f"loss_type {self.loss_type} is reference-free: reference_model_path would not be "
                             "loaded; drop it or use sigmoid, ipo or hinge")
        return self


class KTOParams(PreferenceParams):
    """Kahneman-Tversky optimisation on unpaired answers labelled desirable or undesirable."""

    desirable_weight: float = param(1.0, group="preference", gt=0,
                                    help="Loss weight of desirable answers (raise it when they are the minority).")
    undesirable_weight: float = param(1.0, group="preference", gt=0,
                                      help="Loss weight of undesirable answers.")
