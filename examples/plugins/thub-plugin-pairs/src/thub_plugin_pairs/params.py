"""The parameters of ``pairs_dpo``: thub's shared ones plus ``beta``, each defined once here."""

from __future__ import annotations

from thub.params import BaseParams, param


class PairsParams(BaseParams):
    """DPO on better/worse pairs."""

    beta: float = param(0.1, group="pairs", gt=0, help="Strength of the implicit KL penalty.")
