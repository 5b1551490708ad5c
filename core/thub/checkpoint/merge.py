"""A LoRA/DoRA/rsLoRA adapter merged into its base model: one full HF model, with PEFT's own merge.

The one implementation of the merge: ``thub checkpoint merge`` calls it, and so does a backend's
``save_merged`` (the trl plugin, through ``thub.backend.merge_adapter``). What it does:

1. reads the adapter (``adapter_config.json`` + ``adapter_model.safetensors``, any writer: trl,
   unsloth, ART, LLaMA-Factory, axolotl, verl's ``lora_adapter``) and its base
   (``base_model_name_or_path`` unless one is given);
2. loads the base unquantised on the CPU in its own dtype (the dtype of its stored weights), a
   QLoRA adapter included (with a warning: it was trained against 4/8-bit weights, so the merged
   model is the adapter on the full-precision base, not what training saw);
3. ``PeftModel.from_pretrained(base, adapter).merge_and_unload()`` (PEFT knows DoRA's magnitude
   vector and rsLoRA's scaling; thub re-implements neither);
4. saves safetensors with the tokenizer and chat template (the adapter's own tokenizer files
   when it has them, as trainers save the one they trained with; else the base's), the files a
   serving engine needs from the base (``generation_config.json``, ``preprocessor_config.json``),
   and ``thub_merge.json`` (the adapter, base and dtype: what ``thub checkpoint verify`` compares
   the logits against). It writes into a temporary folder beside ``out`` and renames it, so a
   failed merge leaves nothing half-written.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path
from typing import Any

from thub.checkpoint.layouts import Checkpoint, detect, safetensors_dtypes, weight_files
from thub.errors import UsageError

#: the provenance file of a merged folder (read by verify)
MERGE_RECORD = "thub_merge.json"
#: files a serving engine needs that the model's save_pretrained does not write (LLaMA-Factory does
#: not emit preprocessor_config.json; vLLM needs it for a multimodal model)
SERVING_FILES = ("generation_config.json", "preprocessor_config.json")
#: safetensors header dtype -> torch dtype name
_DTYPES = {"F32": "float32", "BF16": "bfloat16", "F16": "float16", "F64": "float64"}


def read_adapter(adapter: str | Path) -> Checkpoint:
    """``adapter`` as a complete PEFT adapter, or a UsageError (exit 2) naming what is wrong."""
    path = Path(adapter)
    if not path.is_dir():
        raise UsageError(f"{adapter}: {'no such folder' if not path.exists() else 'not a folder'}")
    found = detect(path)
    if found is None or found.layout != "peft-adapter":
        what = f"a {found.layout} checkpoint" if found else "no checkpoint of a known layout"
        raise UsageError(f"{path / 'adapter_config.json'}: not found: {adapter} is {what}, not a PEFT adapter "
                         "(adapter_config.json + adapter_model.safetensors)")
    if not found.complete:
        raise UsageError(f"{adapter}: incomplete adapter: {found.problem}")
    return found


def model_dtype(folder: str | Path) -> str:
    """The dtype a model folder stores its weights in (``float32``, ``bfloat16``, ...): the
    safetensors headers' (most tensors), else ``config.json``'s ``dtype``/``torch_dtype``, else float32."""
    path = Path(folder)
    stored = safetensors_dtypes(weight_files(path))
    if stored and stored.split("+")[0] in _DTYPES:
        return _DTYPES[stored.split("+")[0]]
    try:
        config = json.loads((path / "config.json").read_text())
        value = config.get("dtype") or config.get("torch_dtype")
    except (OSError, ValueError, AttributeError):
        value = None
    return str(value).removeprefix("torch.") if isinstance(value, str) and value != "auto" else "float32"


def resolve_base(adapter: Checkpoint, base: str | None) -> str:
    """The base model folder: ``base``, else the adapter's ``base_model_name_or_path``; a
    UsageError (exit 2) when there is none, it is not a local model folder, or it is quantised."""
    config_file = Path(adapter.path) / "adapter_config.json"
    name = base or adapter.details.get("base_model")
    if not name:
        raise UsageError(f"{config_file}: base_model_name_or_path is empty: give the base model with --base")
    path = Path(name).expanduser()
    origin = "--base" if base else f"{config_file}: base_model_name_or_path"
    if not (path / "config.json").is_file():
        raise UsageError(f"{origin}: {name} is not a local model folder (no config.json there; the Hugging Face "
                         "Hub is not searched): give the base model's folder with --base")
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path / 'config.json'}: unreadable: {exc}") from None
    if isinstance(config, dict) and config.get("quantization_config"):
        raise UsageError(f"{path / 'config.json'}: the base {name} is stored quantised (quantization_config): merging "
                         "into quantised weights rounds the adapter away; give the unquantised base with --base")
    return str(path)


def plan_merge(adapter: str | Path, out: str | Path, base: str | None = None,
               dtype: str | None = None) -> dict[str, Any]:
    """What :func:`merge_adapter` would do, checked but not done (``--dry-run``): adapter, base,
    dtype, tokenizer source, output folder and warnings. Raises UsageError for bad input."""
    found = read_adapter(adapter)
    base_path = resolve_base(found, base)
    target = Path(out)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise UsageError(f"{out}: already exists and is not an empty folder: choose a new --out")
    warnings = []
    if found.details.get("qlora"):
        warnings.append(f"{adapter} was trained on a quantised (QLoRA) base: it is merged into the unquantised "
                        f"{base_path}, so the merged model differs slightly from what training evaluated")
    from thub.data.saved_template import has_tokenizer_files

    return {"adapter": found.path, "base": base_path, "out": str(target), "dtype": dtype or model_dtype(base_path),
            "peft_type": found.details.get("peft_type"), "use_dora": found.details.get("use_dora"),
            "use_rslora": found.details.get("use_rslora"), "qlora": bool(found.details.get("qlora")),
            "tokenizer_from": found.path if has_tokenizer_files(Path(found.path)) else base_path,
            "warnings": warnings}


def adapter_vocabulary(adapter: str | Path) -> int | None:
    """The embedding rows an adapter was trained with, when it saved embeddings (``modules_to_save``
    after added tokens resized them): read from its safetensors header; None when it saved none."""
    from thub.checkpoint.layouts import safetensors_header

    rows = None
    for file in weight_files(Path(adapter), "adapter_model"):
        if file.suffix != ".safetensors":
            continue
        for name, entry in safetensors_header(file).items():
            if ("embed_tokens" in name or "lm_head" in name) and name.endswith("weight") and entry.get("shape"):
                rows = max(rows or 0, int(entry["shape"][0]))
    return rows


def base_with_adapter(base: str, adapter: str, dtype: Any, trust_remote_code: bool = False) -> Any:
    """``PeftModel.from_pretrained(base, adapter)`` on the CPU in ``dtype`` (a torch dtype), the base's
    embeddings first resized to the adapter's vocabulary where training added tokens (the adapter
    then carries the resized embeddings, which do not load into the base's)."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base, dtype=dtype, trust_remote_code=trust_remote_code)
    rows = adapter_vocabulary(adapter)
    if rows is not None and rows != model.get_input_embeddings().num_embeddings:
        model.resize_token_embeddings(rows, mean_resizing=False)
    return PeftModel.from_pretrained(model, adapter)


def merge_adapter(adapter: str | Path, out: str | Path, base: str | None = None, *, dtype: str | None = None,
                  trust_remote_code: bool = False, warn: Any = None) -> dict[str, Any]:
    """Merge ``adapter`` into its base and save the full model to ``out`` (see the module doc).

    ``dtype`` overrides the base's own dtype (a backend's documented ``save_merged`` precision);
    ``warn(message)`` receives each warning (default: printed to stderr). Returns the plan as done,
    with ``files``. Raises UsageError (exit 2) for bad input, before anything is written.
    """
    import sys

    plan = plan_merge(adapter, out, base, dtype)
    for message in plan["warnings"]:
        (warn or (lambda m: print(f"warning: {m}", file=sys.stderr, flush=True)))(message)
    import peft
    import torch
    from transformers import AutoTokenizer

    target = Path(plan["out"])
    target.parent.mkdir(parents=True, exist_ok=True)
    # made with the usual mode (0777 less the umask): tempfile.mkdtemp's 0700 stayed on the renamed folder
    staging = target.parent / f".{target.name}.thub-partial-{os.getpid()}-{os.urandom(4).hex()}"
    staging.mkdir()
    try:
        merged = base_with_adapter(plan["base"], plan["adapter"], getattr(torch, plan["dtype"]),
                                   trust_remote_code).merge_and_unload()
        merged.save_pretrained(staging, safe_serialization=True)
        tokenizer = AutoTokenizer.from_pretrained(plan["tokenizer_from"], trust_remote_code=trust_remote_code)
        tokenizer.save_pretrained(staging)
        written = [path for path in staging.rglob("*") if path.is_file()]
        for name in SERVING_FILES:
            if not (staging / name).exists() and (Path(plan["base"]) / name).is_file():
                shutil.copy2(Path(plan["base"]) / name, staging / name)
        record = {key: plan[key] for key in ("adapter", "base", "dtype", "peft_type", "use_dora", "use_rslora",
                                             "qlora", "tokenizer_from")}
        record["peft_version"] = peft.__version__
        (staging / MERGE_RECORD).write_text(json.dumps(record, indent=2) + "\n")
        for path in written:  # safetensors' save_file leaves 0600: the usual mode, a plain write's (0666 - umask)
            path.chmod(stat.S_IMODE((staging / MERGE_RECORD).stat().st_mode))
        if target.exists():
            target.rmdir()  # empty (plan_merge refused anything else)
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return {**plan, "files": sorted(p.name for p in target.iterdir())}
