"""The parameters of ``embedding_sft``: thub's shared ones plus Training Hub 0.11.2's own names
(``loss_type``, ``loss_fn``, ``warmup_ratio``, ``batch_sampler``), each defined once here."""

from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from thub.backend import BaseParams, param

#: thub's ``loss_type`` -> the sentence-transformers loss class (Training Hub's LOSS_REGISTRY)
LOSSES = {"batch_all_triplet": "BatchAllTripletLoss", "batch_hard_triplet": "BatchHardTripletLoss",
          "mnrl": "MultipleNegativesRankingLoss"}


class EmbeddingSFTParams(BaseParams):
    """Contrastive fine-tuning of a sentence-transformers embedding model on text/label rows."""

    loss_type: Literal["batch_all_triplet", "batch_hard_triplet", "mnrl"] = param(
        "batch_all_triplet", group="embedding",
        help="Contrastive loss: batch_all_triplet, batch_hard_triplet (texts of one label closer than any other "
             "label's), or mnrl (MultipleNegativesRankingLoss on (anchor, positive) pairs of one label).")
    loss_fn: str | None = param(
        group="embedding",
        help="A custom sentence-transformers loss by import string 'module:Name', called with the model "
             "(e.g. sentence_transformers.losses:BatchSemiHardTripletLoss); overrides loss_type. It trains on the "
             "text/label rows.")
    warmup_ratio: float = param(0.1, group="optimizer", ge=0, lt=1,
                                help="Linear warm-up as a fraction of the total steps (warmup_steps instead: steps).")
    batch_sampler: Literal["group_by_label", "no_duplicates", "default"] | None = param(
        group="embedding",
        help="How batches are drawn: group_by_label (the triplet losses' default), no_duplicates (mnrl's), default "
             "(a custom loss's).")
    validation_split: float | None = param(
        group="core", gt=0, lt=1,
        help="Fraction of the rows held out (per label, seeded) for the held-out triplet accuracy in result.json.")
    validation_data_path: str | None = param(
        group="core", path=True,
        help="A separate held-out text/label file for the held-out triplet accuracy (instead of validation_split).")

    @model_validator(mode="after")
    def _one_held_out_set(self) -> EmbeddingSFTParams:
        if self.validation_split and self.validation_data_path:
            raise ValueError("validation_split and validation_data_path cannot be combined (one held-out set)")
        if "warmup_ratio" in self.model_fields_set and self.warmup_steps is not None:
            raise ValueError("warmup_ratio and warmup_steps cannot be combined (one warm-up)")
        return self
