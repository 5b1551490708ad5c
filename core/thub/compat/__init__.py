"""Compatibility layers for users of other training tools (``training_hub``: Training Hub)."""
