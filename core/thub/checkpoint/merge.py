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

What it refuses (exit 2, nothing written), because each makes a model nobody trained that would
otherwise be saved without a word: a number in ``adapter_config.json`` that is not finite
(``lora_alpha: 1e400`` reads as inf); an adapter whose tensors PEFT did not all apply (a saved
tensor no adapted module takes, or an adapted module no saved tensor fills: ``target_modules``
edited, or another base), from PEFT's own load result; a merged tensor that is not finite; and a
``base`` other than the one the adapter records (``base_model_name_or_path``, the thub run's
``model_path``) unless ``force``.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import stat
from pathlib import Path, PurePosixPath
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


def _non_finite(value: Any, where: str = "") -> tuple[str, float] | None:
    """The first number in a JSON value that is not finite (``1e400``, ``NaN``, ``Infinity`` parse
    to inf/nan), with its field path; None when every number is finite."""
    if isinstance(value, float) and not math.isfinite(value):
        return where, value
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = _non_finite(item, f"{where}.{key}" if where else str(key))
        if found:
            return found
    return None


def _check_adapter_config(adapter: Checkpoint) -> None:
    """A number in ``adapter_config.json`` that is not finite is refused (its scaling would make every
    adapted weight inf or NaN)."""
    config_file = Path(adapter.path) / "adapter_config.json"
    try:
        config = json.loads(config_file.read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"{config_file}: unreadable: {exc}") from None
    found = _non_finite(config)
    if found:
        raise UsageError(f"{config_file}: {found[0]}: {found[1]} is not a finite number (the merged weights would "
                         "be inf or NaN): give the value the adapter was trained with")


def _run_record(folder: Path) -> tuple[Path, dict[str, Any]] | None:
    """The ``thub_run.json`` of the thub run ``folder`` belongs to (in it or up to three folders above,
    as :func:`thub.checkpoint.layouts.run_parameters` finds it) and its content."""
    for parent in (folder, *list(folder.parents)[:3]):
        try:
            record = json.loads((parent / "thub_run.json").read_text())
        except (OSError, ValueError):
            continue
        return (parent / "thub_run.json", record) if isinstance(record, dict) else None
    return None


def recorded_bases(adapter: Checkpoint) -> list[tuple[str, str, list[Path]]]:
    """The bases ``adapter`` records it was trained on, as (where it is recorded, the name recorded,
    the folders that name can mean here): ``adapter_config.json``'s ``base_model_name_or_path`` and
    the thub run's ``model_path`` (a relative one also from the run's ``working_dir``)."""
    bases = []
    name = adapter.details.get("base_model")
    if isinstance(name, str) and name.strip():
        bases.append((f"{Path(adapter.path) / 'adapter_config.json'}: base_model_name_or_path", name,
                      [Path(name).expanduser()]))
    found = _run_record(Path(adapter.path))
    if found is not None:
        record_file, record = found
        entry = (record.get("parameters") or {}).get("model_path")
        value = entry.get("value") if isinstance(entry, dict) else None
        if isinstance(value, str) and value.strip():
            where = [Path(value).expanduser()]
            if not where[0].is_absolute() and isinstance(record.get("working_dir"), str):
                where.insert(0, Path(record["working_dir"]) / value)
            bases.append((f"{record_file}: model_path", value, where))
    return bases


def _same_base(given: Path, name: str, where: list[Path]) -> bool:
    """Whether the folder ``given`` is the base recorded as ``name`` (meaning one of ``where``): the
    same folder when the recorded one is here; else (a Hub id, or a path on the machine that trained)
    a folder of the recorded name, or the Hub cache's snapshot of that repository."""
    here = [folder for folder in where if folder.is_dir()]
    if here:
        return any(given.samefile(folder) for folder in here)
    last = PurePosixPath(name.rstrip("/")).name
    resolved = given.resolve()
    return last in (given.absolute().name, resolved.name) or \
        f"models--{name.strip('/').replace('/', '--')}" in resolved.parts


def _check_base(adapter: Checkpoint, base: str, force: bool) -> str | None:
    """Refuse (UsageError) a ``--base`` other than every base the adapter records, unless ``force``:
    then the warning to give. None when it is the recorded base (or nothing is recorded)."""
    bases = recorded_bases(adapter)
    given = Path(base).expanduser()
    if not bases or any(_same_base(given, name, where) for _origin, name, where in bases):
        return None
    recorded = "; ".join(f"{name} ({origin})" for origin, name, _where in bases)
    if force:
        return f"--base {base} is not the base {adapter.path} records ({recorded}): merging anyway (--force)"
    raise UsageError(f"--base {base}: the adapter {adapter.path} was trained on {recorded}, not on {base}: merged "
                     f"into another model its weights make a model nobody trained; give --base {bases[0][1]}, or "
                     f"--force if {base} is that model in another place")


def _check_base_folder(path: Path, origin: str) -> None:
    """A base whose weights are incomplete or named outside its folder (an index listing ``../x`` or an
    absolute path) is refused before transformers opens anything."""
    from thub.checkpoint.layouts import detect

    found = detect(path)
    if found is not None and found.layout == "hf-model" and not found.complete:
        raise UsageError(f"{origin}: {path}: {found.problem}")


def plan_merge(adapter: str | Path, out: str | Path, base: str | None = None,
               dtype: str | None = None, *, force: bool = False) -> dict[str, Any]:
    """What :func:`merge_adapter` would do, checked but not done (``--dry-run``): adapter, base,
    dtype, tokenizer source, output folder and warnings. Raises UsageError for bad input: an
    adapter config number that is not finite, a ``base`` other than the recorded one (unless
    ``force``), a base folder that is incomplete or names files outside itself."""
    found = read_adapter(adapter)
    _check_adapter_config(found)
    base_path = resolve_base(found, base)
    forced = _check_base(found, base, force) if base else None
    _check_base_folder(Path(base_path), "--base" if base else f"{Path(found.path) / 'adapter_config.json'}: "
                                                              "base_model_name_or_path")
    target = Path(out)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise UsageError(f"{out}: already exists and is not an empty folder: choose a new --out")
    warnings = [forced] if forced else []
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


def _names(keys: list[str], shown: int = 3) -> str:
    return ", ".join(keys[:shown]) + (f" and {len(keys) - shown} more" if len(keys) > shown else "")


def _saved_twice(file: Path, unexpected: list[str]) -> set[str]:
    """The ``unexpected`` keys that are copies of a tensor PEFT did load: saving a resized embedding
    (``save_embedding_layers``), PEFT writes its trained copy as ``X.weight``, which it loads, and again
    as ``X.modules_to_save.weight``, which it then reports unexpected (PEFT 0.22)."""
    if file.suffix != ".safetensors" or not any(".modules_to_save." in key for key in unexpected):
        return set()
    import torch
    from safetensors import safe_open

    twice = set()
    with safe_open(str(file), framework="pt") as handle:
        saved = set(handle.keys())  # noqa: SIM118 - safe_open has keys(), no iteration
        for key in unexpected:
            head, _, tail = key.rpartition(".modules_to_save.")
            twin = f"{head}.{tail}"
            if head and key in saved and twin in saved and twin not in unexpected and \
                    torch.equal(handle.get_tensor(key), handle.get_tensor(twin)):
                twice.add(key)
    return twice


def _check_applied(adapter: str, missing: list[str], unexpected: list[str]) -> None:
    """Refuse (UsageError) an adapter PEFT did not apply whole: ``unexpected`` are saved tensors no
    adapted module took (dropped by the merge), ``missing`` adapted modules no saved tensor filled
    (left at PEFT's initial values); both from PEFT's own load result."""
    from thub.checkpoint.layouts import safetensors_header

    files = weight_files(Path(adapter), "adapter_model")
    file = files[0] if files else Path(adapter) / "adapter_model.safetensors"
    twice = _saved_twice(file, unexpected)
    unexpected = [key for key in unexpected if key not in twice]
    if unexpected:
        try:
            total = f" of the adapter's {len(safetensors_header(file))} tensors"
        except (OSError, ValueError):
            total = " adapter tensors"
        raise UsageError(f"{file}: {len(unexpected)}{total} fit no module that adapter_config.json's "
                         f"target_modules/modules_to_save adapt in the base, so the merge would drop them: "
                         f"{_names(unexpected)}: the config no longer matches the weights, or the base is "
                         "another model")
    if missing:
        raise UsageError(f"{file}: {len(missing)} adapter tensor(s) that adapter_config.json's target_modules/"
                         f"modules_to_save call for are not in {file.name}, so those modules would keep PEFT's "
                         f"initial values: {_names(missing)}")


def base_with_adapter(base: str, adapter: str, dtype: Any, trust_remote_code: bool = False) -> Any:
    """``PeftModel.from_pretrained(base, adapter)`` on the CPU in ``dtype`` (a torch dtype), the base's
    embeddings first resized to the adapter's vocabulary where training added tokens (the adapter
    then carries the resized embeddings, which do not load into the base's). A UsageError (exit 2)
    when PEFT did not apply every adapter tensor (:func:`_check_applied`)."""
    import warnings

    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base, dtype=dtype, trust_remote_code=trust_remote_code)
    rows = adapter_vocabulary(adapter)
    if rows is not None and rows != model.get_input_embeddings().num_embeddings:
        model.resize_token_embeddings(rows, mean_resizing=False)
    # from_pretrained mapped the keys with the base's own conversion mapping: the reload below does the same
    key_mapping = getattr(model, "_checkpoint_conversion_mapping", None)
    with warnings.catch_warnings():
        # PEFT's own warning about these keys (some versions warn of missing keys only); thub refuses instead
        warnings.filterwarnings("ignore", message=r".*(missing|unexpected) adapter keys")
        peft_model = PeftModel.from_pretrained(model, adapter)
        # from_pretrained keeps PEFT's load result to itself; loading the same (small) adapter weights into
        # the same adapter again returns it: PEFT's filtered missing and unexpected adapter keys
        result = peft_model.load_adapter(adapter, "default", **({"key_mapping": key_mapping} if key_mapping else {}))
    _check_applied(adapter, list(result.missing_keys), list(result.unexpected_keys))
    return peft_model


def _check_finite(merged: Any, adapter: str, dtype: str) -> None:
    """Refuse (UsageError) a merged model with a NaN or inf in any floating tensor, naming them."""
    import torch

    bad, total = [], 0
    for name, tensor in merged.state_dict().items():
        total += 1
        if tensor.is_floating_point():
            count = int((~torch.isfinite(tensor)).sum())
            if count:
                bad.append(f"{name} ({count} of {tensor.numel()})")
    if bad:
        raise UsageError(f"{adapter}: the merged model has non-finite values (NaN or inf) in {len(bad)} of {total} "
                         f"merged tensors: {_names(bad)}: the adapter's weights, or their scaling (lora_alpha / r "
                         f"in adapter_config.json), overflow {dtype}; nothing was written")


def merge_adapter(adapter: str | Path, out: str | Path, base: str | None = None, *, dtype: str | None = None,
                  trust_remote_code: bool = False, warn: Any = None, force: bool = False) -> dict[str, Any]:
    """Merge ``adapter`` into its base and save the full model to ``out`` (see the module doc).

    ``dtype`` overrides the base's own dtype (a backend's documented ``save_merged`` precision);
    ``warn(message)`` receives each warning (default: printed to stderr); ``force`` merges into a
    ``base`` other than the recorded one. Returns the plan as done, with ``files``. Raises
    UsageError (exit 2) for bad input or a merge that did not apply the adapter whole or made a
    non-finite weight; nothing is left at ``out`` then.
    """
    import sys

    plan = plan_merge(adapter, out, base, dtype, force=force)
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
        _check_finite(merged, plan["adapter"], plan["dtype"])
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
        from thub.checkpoint.manifest import write_manifest

        write_manifest(staging, "thub checkpoint merge")  # last: what verify and push check the folder against
        if target.exists():
            target.rmdir()  # empty (plan_merge refused anything else)
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return {**plan, "files": sorted(p.name for p in target.iterdir())}
