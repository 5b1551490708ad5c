"""``thub checkpoint verify DIR``: is this HF model folder what it should be, before it is served or uploaded?

The checks, in order (each reported; the first failing one is the command's error, exit 1):

1. ``self-contained``: every file the folder names is in it: each shard its index lists is a
   relative name with no ``..`` that resolves (links followed) inside the folder and is there, and
   no file or folder in it is a link leading out (``push`` sends the folder's own files only).
   When it fails, nothing else is read: the other checks are skipped;
2. ``complete``: the folder is an HF model whose every weight file (every shard its index names) is whole
   (and a ``.bin`` names no code to run: :mod:`thub.checkpoint.pickles`);
3. ``config``: ``config.json`` loads with ``AutoConfig``;
4. ``shapes``: every tensor the model built from the config on the meta device has (no memory) is
   saved with that shape, and nothing else is saved (read from the safetensors headers); a config
   that builds no model fails it too. When it fails, the model is not loaded (``logits`` skipped);
5. ``finite``: every floating-point tensor is finite (no NaN/inf), read one tensor at a time;
6. ``tokenizer``: the tokenizer and chat template equal the base's (``--base``, a merge's base, or
   the training input of the thub run the folder belongs to) on a probe conversation with
   a tool call: both render it (text compared), both tokenize their rendering (ids compared);
7. ``logits``: for a merge output (``thub_merge.json``) or with ``--source``, the logits on a
   few probe prompts equal the source's (an adapter on its base, an HF model folder, or a sharded
   checkpoint loaded by its own library through ``thub.checkpoint.consolidate.source_state_dict``)
   within :data:`TOLERANCE`: both are computed in float32 on the CPU, so what is measured is what
   the merge or conversion changed, not the precision of the forward pass;
8. ``manifest``: with a ``thub_manifest.json`` (merge, consolidate, export and push write one), every
   file has the size and sha256 it lists and none is added (:mod:`thub.checkpoint.manifest`): a bit
   flipped in a tensor that still loads is found here only; skipped without one. Last, so that a
   content check that fails is the one named.

A check with nothing to compare with (no base known), or not run because an earlier one failed,
is ``skipped``, with why: every check is always listed.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from thub.checkpoint.layouts import detect, weight_files
from thub.checkpoint.merge import MERGE_RECORD, model_dtype
from thub.errors import UsageError
from thub.runner.checkpoints import INDEX_FILES, shard_name_problem

#: allowed max |logit difference| / max(1, max |source logit|), by the verified model's stored dtype:
#: float32 keeps the merged weights exactly up to summation order; 16-bit storage rounds each
#: merged weight to 8 (bfloat16) or 11 (float16) significant bits
TOLERANCE: dict[str, float] = {"float32": 1e-4, "float64": 1e-6, "float16": 5e-3, "bfloat16": 3e-2}
#: texts the logits are compared on (besides the probe conversation)
PROBE_TEXTS = ("The capital of France is", "def fibonacci(n):\n    if n < 2:\n        return n")
#: at most this many tokens of each probe (the comparison needs no long context)
PROBE_TOKENS = 64
#: the checks, in the order they run
CHECKS = ("self-contained", "complete", "config", "shapes", "finite", "tokenizer", "logits", "manifest")


@dataclass
class Check:
    """One check's outcome: ``ok`` True (passed), False (failed) or None (skipped, see ``message``)."""

    check: str
    ok: bool | None
    message: str

    def to_dict(self) -> dict[str, Any]:
        """The check as JSON data."""
        return asdict(self)


def _record(folder: Path) -> dict[str, Any]:
    try:
        data = json.loads((folder / MERGE_RECORD).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def plan_verify(folder: str | Path, base: str | None = None, source: str | None = None) -> dict[str, Any]:
    """What :func:`verify` would check against what (``--dry-run``), loading no weights. Raises
    UsageError (exit 2) when ``folder`` is not an HF model folder or ``--base``/``--source`` is missing."""
    path = Path(folder)
    if not path.is_dir():
        raise UsageError(f"{folder}: {'no such folder' if not path.exists() else 'not a folder'}")
    found = detect(path)
    if found is None:
        raise UsageError(f"{folder}: not a checkpoint of a known layout (no config.json with weights; "
                         "docs/checkpoints.md lists the layouts)")
    if found.layout == "peft-adapter":
        raise UsageError(f"{path / 'adapter_config.json'}: {folder} is a PEFT adapter: merge it first "
                         f"(thub checkpoint merge {folder} --out DIR), then verify DIR")
    if found.layout != "hf-model":
        raise UsageError(f"{folder}: a {found.layout} checkpoint, not an HF model folder: consolidate it first "
                         f"(thub checkpoint consolidate {folder} --out DIR), then verify DIR --source {folder}")
    record = _record(path)
    if source and not Path(source).exists():
        raise UsageError(f"--source: {source}: no such file or folder")
    if base:
        from thub.data.saved_template import has_tokenizer_files

        where = Path(base)
        if not where.is_dir() or not (has_tokenizer_files(where) or (where / "config.json").is_file()):
            raise UsageError(f"--base: {base}: {'no such folder' if not where.exists() else 'not a model folder'} "
                             "(expected a folder with the base model's config.json and tokenizer files)")
    if not base and not record:  # a run's own model: compared with the training input (a local folder)
        from thub.checkpoint.layouts import run_parameters

        model_path = (run_parameters(path) or {}).get("model_path")
        base = str(model_path) if model_path and Path(str(model_path)).is_dir() else None
    base = base or record.get("base")
    source = source or record.get("adapter")
    dtype = model_dtype(path)
    return {"model": str(path), "layout": found.layout, "complete": found.complete, "problem": found.problem,
            "dtype": dtype, "base": base, "source": source,
            "tolerance": {"metric": "max |logit - source logit| / max(1, max |source logit|), float32 on the CPU",
                          "dtype": dtype, "value": TOLERANCE.get(dtype, 3e-2)},
            "checks": list(CHECKS)}


def _inside(root: Path, path: Path) -> Path | None:
    """Where ``path`` resolves (links followed) when that is inside ``root`` (resolved), else None."""
    try:
        resolved = path.resolve()
    except (OSError, RuntimeError):  # a link loop
        return None
    return resolved if resolved.is_relative_to(root) else None


def outside_references(folder: Path) -> list[str]:
    """What ``folder`` names or holds outside itself, one line each: a shard an index lists that is
    absolute, has a ``..``, resolves outside the folder or is missing; a name in
    ``tokenizer_config.json``'s ``fast_tokenizer_files`` that is absolute or has a ``..``; a file or
    folder in it that is a link leading out. Nothing is opened but the index and tokenizer config."""
    root = folder.resolve()
    found = []
    for index_name in INDEX_FILES:
        index = folder / index_name
        if not index.is_file():
            continue
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
            shards = sorted({str(v) if isinstance(v, str) else repr(v) for v in weight_map.values()})
        except (OSError, ValueError, KeyError, AttributeError, TypeError):
            found.append(f"{index_name} is unreadable (no weight_map of file names)")
            continue
        for shard in shards:
            where = shard_name_problem(shard)
            if where is None and _inside(root, folder / shard) is None:
                where = f"a link to {_target(folder / shard)}, outside the folder"
            elif where is None and not (folder / shard).is_file():
                where = "no such file in the folder"
            if where:
                found.append(f"{index_name} names {shard!r}: {where}")
    try:
        names = json.loads((folder / "tokenizer_config.json").read_text()).get("fast_tokenizer_files") or []
    except (OSError, ValueError, AttributeError):
        names = []
    for name in names if isinstance(names, list) else [names]:
        if where := shard_name_problem(name):
            found.append(f"tokenizer_config.json's fast_tokenizer_files names {name!r}: {where}")
    for parent, folders, files in os.walk(folder):  # links to folders are listed, not entered
        for name in sorted(folders + files):
            entry = Path(parent) / name
            if entry.is_symlink() and _inside(root, entry) is None:
                found.append(f"{entry.relative_to(folder)} is a link to {_target(entry)}, outside the folder")
    return found


def _target(link: Path) -> str:
    try:
        return str(link.resolve())
    except (OSError, RuntimeError):
        return f"{os.readlink(link)} (a link loop)"


def _self_contained(path: Path) -> Check:
    found = outside_references(path)
    if found:
        return Check("self-contained", False, f"{len(found)} file reference(s) leave the folder or are missing (what "
                                              f"is not in the folder is not pushed with it): {'; '.join(found[:3])}"
                                              + (f"; and {len(found) - 3} more" if len(found) > 3 else ""))
    return Check("self-contained", True, "every file it names is in the folder; no link leads out")


def _shapes(path: Path, config: Any) -> tuple[Check, list[Path]]:
    """Saved tensor shapes against the model the config builds (meta device: no memory)."""
    import torch
    from transformers import AutoModelForCausalLM

    from thub.checkpoint.layouts import safetensors_header

    try:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
    except Exception as exc:  # noqa: BLE001 - a config transformers cannot build a model from is the finding
        return Check("shapes", False, f"{path / 'config.json'}: config.json builds no model: "
                                      f"{type(exc).__name__}: {exc}"), weight_files(path)
    expected = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    files = weight_files(path)
    saved: dict[str, tuple[int, ...]] = {}
    for file in files:
        if file.suffix == ".safetensors":
            saved.update({k: tuple(v["shape"]) for k, v in safetensors_header(file).items()})
        else:
            state = torch.load(file, map_location="meta", weights_only=True, mmap=True)
            saved.update({k: tuple(v.shape) for k, v in state.items()})
    tied = set()
    output, inputs = model.get_output_embeddings(), model.get_input_embeddings()
    if output is not None and inputs is not None and output.weight is inputs.weight:
        tied = {name for name in expected if name.endswith(("lm_head.weight",))}
    wrong = [f"{n}: saved {list(saved[n])}, the config makes {list(s)}" for n, s in expected.items()
             if n in saved and saved[n] != s]
    missing = [n for n in expected if n not in saved and n not in tied]
    unexpected = [n for n in saved if n not in expected]
    if wrong:
        return Check("shapes", False, f"{len(wrong)} tensor(s) shaped unlike config.json: {wrong[0]}"), files
    if missing:
        return Check("shapes", False, f"{len(missing)} tensor(s) of the model are not saved: "
                                      f"{', '.join(missing[:3])}"), files
    if unexpected:
        return Check("shapes", False, f"{len(unexpected)} saved tensor(s) the config has no place for: "
                                      f"{', '.join(unexpected[:3])}"), files
    return Check("shapes", True, f"{len(saved)} tensors, every shape as config.json makes it"), files


def _finite(files: list[Path]) -> Check:
    """Every floating tensor finite, one tensor in memory at a time."""
    import torch

    count = 0
    for file in files:
        if file.suffix == ".safetensors":
            from safetensors import safe_open

            with safe_open(str(file), framework="pt") as handle:
                for name in handle.keys():  # noqa: SIM118 - safe_open has keys(), no iteration
                    tensor = handle.get_tensor(name)
                    count += 1
                    if tensor.is_floating_point() and not torch.isfinite(tensor).all():
                        bad = int((~torch.isfinite(tensor)).sum())
                        return Check("finite", False, f"{file.name}: tensor {name} has {bad} non-finite value(s) "
                                                      f"(NaN or inf) of {tensor.numel()}")
        else:
            state = torch.load(file, map_location="cpu", weights_only=True, mmap=True)
            for name, tensor in state.items():
                count += 1
                if tensor.is_floating_point() and not torch.isfinite(tensor).all():
                    return Check("finite", False, f"{file.name}: tensor {name} has non-finite values (NaN or inf)")
    return Check("finite", True, f"all {count} tensors finite")


def _probe_render(tokenizer: Any) -> tuple[str, list[int]]:
    from thub.data.template_check import SAMPLE_MESSAGES, SAMPLE_TOOLS

    text = tokenizer.apply_chat_template(SAMPLE_MESSAGES, tools=SAMPLE_TOOLS, tokenize=False)
    return text, list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _tokenizer(path: Path, base: str | None) -> Check:
    from transformers import AutoTokenizer

    if not base:
        return Check("tokenizer", None, "no base to compare with (give --base MODEL, or verify a merge output)")
    if not Path(base).is_dir():
        return Check("tokenizer", None, f"the base {base} ({MERGE_RECORD}) is no longer there: give --base MODEL")
    try:
        ours = AutoTokenizer.from_pretrained(str(path))
    except Exception as exc:  # noqa: BLE001 - a missing/broken tokenizer is the check's finding
        return Check("tokenizer", False, f"{path}: the tokenizer does not load: {type(exc).__name__}: {exc}")
    theirs = AutoTokenizer.from_pretrained(base)
    if not theirs.chat_template:
        return Check("tokenizer", None, f"the base {base} has no chat template: nothing to compare with")
    if not ours.chat_template:
        return Check("tokenizer", False, f"{path}: no chat template saved (the base {base} has one): tool calls "
                                         "would be lost when served; copy the base's tokenizer files into it")
    try:
        text, ids = _probe_render(ours)
    except Exception as exc:  # noqa: BLE001 - a template that cannot render the probe is the finding
        return Check("tokenizer", False, f"{path}: the chat template cannot render the tool-call probe: {exc}")
    expected_text, expected_ids = _probe_render(theirs)
    if text != expected_text:
        at = next((i for i, (a, b) in enumerate(zip(expected_text, text)) if a != b),
                  min(len(text), len(expected_text)))
        return Check("tokenizer", False, f"{path}: the chat template renders the tool-call probe unlike the base "
                                         f"{base} from character {at}: expected {expected_text[at:at + 40]!r}, "
                                         f"found {text[at:at + 40]!r}")
    if ids != expected_ids:
        at = next((i for i, (a, b) in enumerate(zip(expected_ids, ids)) if a != b), min(len(ids), len(expected_ids)))
        return Check("tokenizer", False, f"{path}: the tokenizer encodes the probe unlike the base {base} from token "
                                         f"{at}: expected {expected_ids[at:at + 8]}, found {ids[at:at + 8]}")
    return Check("tokenizer", True, f"chat template and tokenizer equal the base's on the tool-call probe "
                                    f"({len(ids)} tokens)")


def probe_inputs(path: Path) -> list[list[int]]:
    """Token ids of the probe prompts (the probe conversation and :data:`PROBE_TEXTS`), with the
    verified model's tokenizer; ids 1..16 when it has none."""
    try:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(path))
    except Exception:  # noqa: BLE001 - no tokenizer: probe with plain ids
        return [list(range(1, 17))]
    prompts = [tokenizer(text, add_special_tokens=False)["input_ids"][:PROBE_TOKENS] for text in PROBE_TEXTS]
    try:
        prompts.insert(0, _probe_render(tokenizer)[1][:PROBE_TOKENS])
    except Exception:  # noqa: BLE001 - a template problem is the tokenizer check's to report
        pass
    return [p for p in prompts if p]


def _source_model(source: str, base: str | None, config: Any) -> tuple[Any, str]:
    """The source model in float32 on the CPU and a description of it."""
    import torch
    from transformers import AutoModelForCausalLM

    found = detect(source)
    if found is not None and found.layout == "peft-adapter":
        from thub.checkpoint.merge import base_with_adapter, read_adapter, resolve_base

        base_path = resolve_base(read_adapter(source), base)
        model = base_with_adapter(base_path, source, torch.float32)
        return model.eval(), f"the adapter {source} on {base_path}, unmerged"
    if found is not None and found.layout == "hf-model":
        return AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32).eval(), f"the model {source}"
    from thub.checkpoint.consolidate import source_state_dict

    state = source_state_dict(Path(source))  # by the library that wrote it (DCP's loader, zero_to_fp32)
    # built on the CPU from the config, so what the checkpoint does not save is made by the model's
    # own init: non-persistent buffers (Llama's rotary inv_freq) would stay on the meta device otherwise
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict({k: v.float() for k, v in state.items()}, strict=False)
    tied = {"lm_head.weight"} if getattr(config, "tie_word_embeddings", False) else set()
    missing = [name for name in missing if name not in tied]
    if missing or unexpected:
        raise UsageError(f"--source {source}: its weights do not fit {type(model).__name__} of config.json "
                         f"({len(missing)} missing, e.g. {', '.join(missing[:3]) or '-'}; {len(unexpected)} "
                         f"unexpected, e.g. {', '.join(unexpected[:3]) or '-'})")
    return model.eval(), f"the {found.layout if found else ''} checkpoint {source}, loaded by its own library"


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0][:300]


def _logits(path: Path, source: str | None, base: str | None, config: Any, dtype: str) -> Check:
    import torch
    from transformers import AutoModelForCausalLM

    if not source:
        return Check("logits", None, "not a merge output and no --source: nothing to compare the logits with")
    if not Path(source).exists():
        return Check("logits", None, f"the source {source} ({MERGE_RECORD}) is no longer there")
    if base and not Path(base).is_dir():
        return Check("logits", None, f"the base {base} ({MERGE_RECORD}) is no longer there: give --base MODEL")
    tolerance = TOLERANCE.get(dtype, 3e-2)
    try:
        reference, what = _source_model(source, base, config)
    except UsageError:
        raise
    except Exception as exc:  # noqa: BLE001 - a source that does not load leaves nothing to compare with
        return Check("logits", False, f"the source {source} does not load: {type(exc).__name__}: {_first_line(exc)}")
    try:
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    except Exception as exc:  # noqa: BLE001 - a model that does not load is the check's finding
        return Check("logits", False, f"{path}: does not load: {type(exc).__name__}: {_first_line(exc)}")
    worst = 0.0
    prompts = probe_inputs(path)
    with torch.no_grad():
        for ids in prompts:
            batch = torch.tensor([ids])
            expected = reference(input_ids=batch).logits
            found = model(input_ids=batch).logits
            diff = (found - expected).abs().max().item()
            scale = max(1.0, expected.abs().max().item())
            worst = max(worst, diff / scale if diff == diff else float("inf"))
    message = (f"{len(prompts)} probe prompts: max |logit difference| {worst:.3g} of the source's scale "
               f"(tolerance {tolerance:g} for {dtype}) against {what}")
    return Check("logits", worst <= tolerance, message)


def verify(folder: str | Path, base: str | None = None, source: str | None = None) -> dict[str, Any]:
    """Run every check on ``folder`` (see the module doc). Returns the plan with ``checks`` (each
    :class:`Check` as data), ``ok`` and ``failed`` (the first failing check, or None). Raises
    UsageError (exit 2) for bad input."""
    plan = plan_verify(folder, base, source)
    path = Path(plan["model"])
    contained = _self_contained(path)
    checks: list[Check] = [contained, Check("complete", plan["complete"], plan["problem"] or "every weight file whole")]
    config = None
    if contained.ok and plan["complete"]:
        try:
            from transformers import AutoConfig

            config = AutoConfig.from_pretrained(str(path))
            checks.append(Check("config", True, f"{type(config).__name__} ({config.model_type})"))
        except Exception as exc:  # noqa: BLE001 - the check's finding
            checks.append(Check("config", False, f"{path / 'config.json'}: does not load: {type(exc).__name__}: {exc}"))
    if config is not None:
        shapes, files = _shapes(path, config)
        checks += [shapes, _finite(files), _tokenizer(path, plan["base"])]
        if shapes.ok:
            checks.append(_logits(path, plan["source"], plan["base"], config, plan["dtype"]))
    if contained.ok:  # last: a content check that fails says more; this one finds what they cannot
        from thub.checkpoint.manifest import check_manifest

        listed = check_manifest(path)
        checks.append(Check("manifest", listed.ok, listed.message))
    # every check is listed: one not run says which earlier check stopped it
    stopped = next((c.check for c in checks if c.ok is False), "an earlier")
    done = {c.check for c in checks}
    checks += [Check(name, None, f"not run: the {stopped} check failed") for name in CHECKS if name not in done]
    failed = next((c for c in checks if c.ok is False), None)
    return {**plan, "checks": [c.to_dict() for c in checks], "ok": failed is None,
            "failed": failed.to_dict() if failed else None}
