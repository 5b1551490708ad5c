"""After training: list, merge, consolidate and verify checkpoints of every backend (``thub checkpoint``).

- :mod:`thub.checkpoint.layouts`: every layout thub knows, detected from file names and headers;
- :mod:`thub.checkpoint.merge`: a LoRA/DoRA/rsLoRA adapter merged into its base (PEFT's own merge);
- :mod:`thub.checkpoint.consolidate`: sharded training state -> HF safetensors, streaming;
- :mod:`thub.checkpoint.verify`: a model folder checked before it is served or uploaded.

Nothing here imports torch, transformers or peft at module level: ``thub --help`` stays light.
"""
