"""Hostile adapters and model folders for ``thub checkpoint merge`` and ``verify`` (issue 35 items 6 and 7).

Merge: an adapter whose config no longer fits its tensors (``target_modules`` missing half of them), whose
``lora_alpha`` is ``1e400`` (JSON reads it as inf), or that is merged onto a base other than the one it was
trained on is refused with exit 2, naming what is wrong, and nothing is left at ``--out``.

Verify: a ``config.json`` that disagrees with the weights is a failed ``shapes`` check in the printed table (was
a transformers traceback), and a shard index naming a file outside the folder (``../``, absolute, a link out) or
a missing one is a failed ``self-contained`` check, the outside file never opened.

Every adapter is saved by PEFT itself from the tiny model (conftest.py's ``tiny_model``), then damaged here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from thub.errors import UsageError

pytestmark = pytest.mark.needs_module("peft", "safetensors")

#: a thub subprocess (the ``thub`` fixture of tests/conftest.py)
Run = Callable[..., subprocess.CompletedProcess[str]]
#: the modules the adapters adapt (each a lora_A and a lora_B tensor in each of the tiny model's 2 layers)
TARGETS = ["q_proj", "v_proj", "down_proj"]


def _adapter(base: Path, out: Path) -> Path:
    """A LoRA adapter saved by PEFT, its B matrices not zero (init_lora_weights=False): merging changes the model."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base)
    get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=TARGETS,
                                     init_lora_weights=False)).save_pretrained(out)
    return out


def _edit_config(adapter: Path, **changes: Any) -> None:
    config = json.loads((adapter / "adapter_config.json").read_text())
    config.update(changes)
    (adapter / "adapter_config.json").write_text(json.dumps(config, indent=2))


@pytest.fixture(scope="module")
def saved_adapter(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One adapter for the module; each test damages its own copy."""
    return _adapter(tiny_model, tmp_path_factory.mktemp("adapter") / "adapter")


@pytest.fixture
def adapter(saved_adapter: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(saved_adapter, tmp_path / "adapter"))


def _left_beside(out: Path) -> list[str]:
    """What a merge left in the folder ``--out`` was to be made in (besides the inputs the test put there)."""
    return sorted(p.name for p in out.parent.iterdir() if p.name not in {"adapter", "base", "elsewhere"})


# --- merge: every adapter tensor applied ----------------------------------------------------------------------


def test_target_modules_missing_half_the_tensors_is_refused_and_nothing_written(adapter: Path, tmp_path: Path,
                                                                               thub: Run) -> None:
    _edit_config(adapter, target_modules=["q_proj"])  # v_proj's and down_proj's tensors find no module
    out = tmp_path / "merged"
    done = thub("checkpoint", "merge", str(adapter), "--out", str(out))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert "8 of the adapter's 12 tensors" in done.stderr, done.stderr
    assert "self_attn.v_proj.lora_A" in done.stderr and "target_modules" in done.stderr
    assert not out.exists() and _left_beside(out) == []


def test_targeted_modules_without_saved_tensors_are_refused(adapter: Path, tmp_path: Path) -> None:
    from thub.checkpoint.merge import merge_adapter

    # the config adapts o_proj too, but the file holds no tensor for it: PEFT leaves it at its initial values
    _edit_config(adapter, target_modules=[*TARGETS, "o_proj"])
    with pytest.raises(UsageError, match=r"4 adapter tensor\(s\) .*not in .*adapter_model.safetensors.*o_proj"):
        merge_adapter(adapter, tmp_path / "merged")
    assert _left_beside(tmp_path / "merged") == []


def test_a_resized_embedding_saved_twice_merges_unless_its_copies_differ(tiny_model: Path, tmp_path: Path) -> None:
    import torch
    from peft import LoraConfig, get_peft_model
    from safetensors.torch import load_file, save_file
    from transformers import AutoModelForCausalLM

    from thub.checkpoint.merge import merge_adapter

    # PEFT saves a resized embedding's trained copy twice (X.weight, loaded, and X.modules_to_save.weight, which
    # PEFT's load result calls unexpected): equal copies are one tensor applied
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    model.resize_token_embeddings(520)
    config = LoraConfig(r=4, target_modules=["q_proj"], init_lora_weights=False, modules_to_save=["embed_tokens"])
    adapter = tmp_path / "adapter"
    get_peft_model(model, config).save_pretrained(adapter)
    merge_adapter(adapter, tmp_path / "merged")
    tensors = load_file(str(adapter / "adapter_model.safetensors"))
    twin = "base_model.model.model.embed_tokens.modules_to_save.weight"
    assert twin in tensors and torch.equal(tensors[twin], tensors["base_model.model.model.embed_tokens.weight"])
    tensors[twin] = tensors[twin] + 1  # copies that differ: the one PEFT leaves out is not the one it loaded
    save_file(tensors, str(adapter / "adapter_model.safetensors"))
    with pytest.raises(UsageError, match=r"1 of the adapter's \d+ tensors fit no module.*embed_tokens.modules_to_save"):
        merge_adapter(adapter, tmp_path / "merged2")
    assert not (tmp_path / "merged2").exists()


# --- merge: every merged tensor finite ------------------------------------------------------------------------


def test_an_infinite_lora_alpha_is_refused_naming_the_field(adapter: Path, tmp_path: Path, thub: Run) -> None:
    text = (adapter / "adapter_config.json").read_text()
    assert '"lora_alpha": 8' in text
    (adapter / "adapter_config.json").write_text(text.replace('"lora_alpha": 8', '"lora_alpha": 1e400'))
    out = tmp_path / "merged"
    for args in ((), ("--dry-run",)):  # found before anything is loaded: the dry run refuses it too
        done = thub("checkpoint", "merge", str(adapter), "--out", str(out), *args)
        assert done.returncode == 2, done.stdout + done.stderr
        assert "Traceback" not in done.stderr
        assert f"{adapter / 'adapter_config.json'}: lora_alpha: inf is not a finite number" in done.stderr
    assert not out.exists() and _left_beside(out) == []


def test_non_finite_merged_weights_are_refused_naming_the_tensors(adapter: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    from thub.checkpoint.merge import merge_adapter

    # a finite config whose product overflows float32: the merged tensors are inf/NaN, the config is not to blame
    _edit_config(adapter, lora_alpha=1e300)
    with pytest.raises(UsageError, match=r"non-finite.*of \d+ merged tensors.*self_attn\.q_proj\.weight"):
        merge_adapter(adapter, tmp_path / "merged")
    assert _left_beside(tmp_path / "merged") == []
    # a NaN in the adapter's own tensors
    _edit_config(adapter, lora_alpha=8)
    tensors = load_file(str(adapter / "adapter_model.safetensors"))
    name = next(n for n in sorted(tensors) if "v_proj.lora_B" in n)
    tensors[name][0, 0] = float("nan")
    save_file(tensors, str(adapter / "adapter_model.safetensors"))
    with pytest.raises(UsageError, match=r"1 of \d+ merged tensors.*v_proj\.weight"):
        merge_adapter(adapter, tmp_path / "merged")
    assert _left_beside(tmp_path / "merged") == []


# --- merge: the recorded base -----------------------------------------------------------------------------------


def test_another_base_is_refused_unless_forced(adapter: Path, tiny_model: Path, tmp_path: Path, thub: Run) -> None:
    other = Path(shutil.copytree(tiny_model, tmp_path / "base"))
    out = tmp_path / "merged"
    done = thub("checkpoint", "merge", str(adapter), "--out", str(out), "--base", str(other))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    message = " ".join(done.stderr.split())
    assert f"was trained on {tiny_model}" in message and f"--base {other}" in message and "--force" in message
    assert not out.exists() and _left_beside(out) == []
    done = thub("checkpoint", "merge", str(adapter), "--out", str(out), "--base", str(other), "--force", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["base"] == str(other)
    assert json.loads((out / "thub_merge.json").read_text())["base"] == str(other)


def test_the_recorded_base_under_another_spelling_is_the_same_base(adapter: Path, tiny_model: Path,
                                                                   tmp_path: Path) -> None:
    from thub.checkpoint.merge import plan_merge

    link = tmp_path / "link-to-base"
    link.symlink_to(tiny_model, target_is_directory=True)
    for given in (str(link), f"{tiny_model}/", str(tiny_model / ".." / tiny_model.name)):
        assert plan_merge(adapter, tmp_path / "merged", base=given)["base"] == str(Path(given).expanduser())


def test_a_recorded_hub_id_accepts_a_folder_of_its_name_only(adapter: Path, tiny_model: Path, tmp_path: Path) -> None:
    from thub.checkpoint.merge import plan_merge

    _edit_config(adapter, base_model_name_or_path="someorg/Tiny-Llama-1B")  # not a folder here
    named = Path(shutil.copytree(tiny_model, tmp_path / "elsewhere" / "Tiny-Llama-1B"))
    assert plan_merge(adapter, tmp_path / "merged", base=str(named))["base"] == str(named)
    cache = tmp_path / "elsewhere" / "hub" / "models--someorg--Tiny-Llama-1B" / "snapshots" / "0123abc"
    shutil.copytree(tiny_model, cache)
    assert plan_merge(adapter, tmp_path / "merged", base=str(cache))["base"] == str(cache)
    instruct = Path(shutil.copytree(tiny_model, tmp_path / "elsewhere" / "Tiny-Llama-1B-Instruct"))
    with pytest.raises(UsageError, match=r"someorg/Tiny-Llama-1B \(.*adapter_config.json: base_model_name_or_path"):
        plan_merge(adapter, tmp_path / "merged", base=str(instruct))
    assert plan_merge(adapter, tmp_path / "merged", base=str(instruct), force=True)["base"] == str(instruct)


def test_the_thub_run_record_is_a_recorded_base(tiny_model: Path, saved_adapter: Path, tmp_path: Path) -> None:
    from thub.checkpoint.merge import plan_merge

    run = tmp_path / "run"
    adapter = Path(shutil.copytree(saved_adapter, run / "final"))
    _edit_config(adapter, base_model_name_or_path=None)  # some writers leave it empty; the run says what it was
    other = Path(shutil.copytree(tiny_model, tmp_path / "base"))
    # typed relative to where training ran (thub_run.json's working_dir)
    (run / "thub_run.json").write_text(json.dumps({"working_dir": str(tiny_model.parent.parent),
                                                   "parameters": {"model_path": {
                                                       "value": f"{tiny_model.parent.name}/{tiny_model.name}"}}}))
    assert plan_merge(adapter, tmp_path / "merged", base=str(tiny_model))["base"] == str(tiny_model)
    with pytest.raises(UsageError, match=r"thub_run.json: model_path"):
        plan_merge(adapter, tmp_path / "merged", base=str(other))


# --- verify: a config.json that disagrees with the weights ---------------------------------------------------


@pytest.fixture
def merged(adapter: Path, tmp_path: Path) -> Path:
    """A good merge output (thub_merge.json: verify compares its logits with the adapter on its base)."""
    from thub.checkpoint.merge import merge_adapter

    return Path(merge_adapter(adapter, tmp_path / "merged")["out"])


@pytest.mark.parametrize("change", [{"hidden_size": 128}, {"vocab_size": 600}], ids=["hidden_size", "vocab_size"])
def test_a_config_unlike_the_weights_is_a_failed_check_in_the_table(change: dict[str, int], merged: Path,
                                                                    thub: Run) -> None:
    config = json.loads((merged / "config.json").read_text())
    config.update(change)
    (merged / "config.json").write_text(json.dumps(config))
    done = thub("checkpoint", "verify", str(merged))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    rows = {line.split()[0]: line.split()[1] for line in done.stdout.splitlines() if line.split()}
    assert rows["shapes"] == "FAILED" and rows["logits"] == "skipped", done.stdout
    expected = "[512, 128]" if "hidden_size" in change else "[600, 64]"
    message = " ".join(done.stdout.split())
    assert f"model.embed_tokens.weight: saved [512, 64], the config makes {expected}" in message


def test_a_config_that_builds_no_model_is_a_failed_shapes_check(merged: Path) -> None:
    from thub.checkpoint.verify import verify

    config = json.loads((merged / "config.json").read_text())
    config["hidden_act"] = "no_such_activation"  # AutoConfig reads it; building the model fails
    (merged / "config.json").write_text(json.dumps(config))
    report = verify(merged)
    checks = {c["check"]: c for c in report["checks"]}
    assert report["failed"]["check"] == "shapes" and checks["shapes"]["ok"] is False
    assert "config.json builds no model" in checks["shapes"]["message"]
    assert checks["logits"]["ok"] is None


# --- verify: self-contained -----------------------------------------------------------------------------------


@pytest.fixture
def sharded(tiny_model: Path, tmp_path: Path) -> Path:
    """The tiny model saved in 3+ safetensors shards with model.safetensors.index.json."""
    from transformers import AutoModelForCausalLM

    out = Path(shutil.copytree(tiny_model, tmp_path / "sharded", ignore=shutil.ignore_patterns("model.safetensors")))
    AutoModelForCausalLM.from_pretrained(tiny_model).save_pretrained(out, max_shard_size="200KB")
    assert len(list(out.glob("model-*.safetensors"))) >= 3
    return out


def _move_out(sharded: Path, new_name: Callable[[Path], str]) -> tuple[Path, str]:
    """One shard moved to ``../other/`` with a NaN in it (any check that opened it would report the NaN),
    and the index pointing at it as ``new_name(moved)``; returns the moved file and the name in the index."""
    from safetensors.torch import load_file, save_file

    index_file = sharded / "model.safetensors.index.json"
    index = json.loads(index_file.read_text())
    shard = sorted(set(index["weight_map"].values()))[0]
    moved = sharded.parent / "other" / shard
    moved.parent.mkdir()
    tensors = load_file(str(sharded / shard))
    next(iter(tensors.values())).view(-1)[0] = float("nan")
    save_file(tensors, str(moved), metadata={"format": "pt"})
    (sharded / shard).unlink()
    name = new_name(moved)
    index["weight_map"] = {k: (name if v == shard else v) for k, v in index["weight_map"].items()}
    index_file.write_text(json.dumps(index))
    return moved, name


@pytest.fixture
def opened_outside(tmp_path: Path) -> Iterator[list[str]]:
    """Every file under ``tmp_path/other`` opened from Python while the test runs (an audit hook)."""
    outside = os.path.realpath(tmp_path / "other")
    opened: list[str] = []
    active = [True]

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if active[0] and event == "open" and isinstance(args[0], (str, Path)) and \
                os.path.realpath(args[0]).startswith(outside):
            opened.append(str(args[0]))

    sys.addaudithook(hook)  # hooks cannot be removed: this one goes quiet after the test
    yield opened
    active[0] = False


@pytest.mark.parametrize("how", ["dotdot", "absolute", "link"])
def test_a_shard_outside_the_folder_is_a_failed_self_contained_check(how: str, sharded: Path, tiny_model: Path,
                                                                     opened_outside: list[str]) -> None:
    from thub.checkpoint.layouts import detect, weight_files
    from thub.checkpoint.verify import verify

    def name(moved: Path) -> str:
        if how == "dotdot":
            return f"../other/{moved.name}"
        if how == "absolute":
            return str(moved)
        (sharded / "linked.safetensors").symlink_to(moved)  # inside by name, outside once resolved
        return "linked.safetensors"

    moved, entry = _move_out(sharded, name)
    report = verify(sharded, source=str(tiny_model))
    checks = {c["check"]: c for c in report["checks"]}
    assert report["failed"]["check"] == "self-contained", report["checks"]
    assert checks["self-contained"]["ok"] is False
    assert f"model.safetensors.index.json names {entry!r}" in checks["self-contained"]["message"]
    assert "outside the folder" in checks["self-contained"]["message"]
    assert all(checks[name]["ok"] is None and "not run" in checks[name]["message"]
               for name in ("config", "shapes", "finite", "tokenizer", "logits"))
    assert "NaN" not in json.dumps(report["checks"])  # the outside shard was never read
    found = detect(sharded)
    assert found is not None and moved.is_file()
    if how == "link":  # followed by the loaders, as transformers follows them (the Hub cache links its files)
        assert checks["complete"]["ok"] is True and found.complete is True
        return
    assert opened_outside == []  # never opened, not even for its header
    assert checks["complete"]["ok"] is False and found.complete is False and "outside the folder" in str(found.problem)
    assert all(p.resolve().is_relative_to(sharded.resolve()) for p in weight_files(sharded))


def test_a_missing_shard_is_a_failed_self_contained_check(sharded: Path) -> None:
    from thub.checkpoint.verify import verify

    shard = sorted(sharded.glob("model-*.safetensors"))[-1]
    shard.unlink()
    report = verify(sharded)
    checks = {c["check"]: c for c in report["checks"]}
    assert checks["self-contained"]["ok"] is False and f"{shard.name!r}: no such file" in \
        checks["self-contained"]["message"]


def test_a_linked_file_outside_the_folder_is_named(sharded: Path, tmp_path: Path) -> None:
    from thub.checkpoint.verify import verify

    (tmp_path / "template.jinja").write_text((sharded / "chat_template.jinja").read_text())
    (sharded / "chat_template.jinja").unlink()
    (sharded / "chat_template.jinja").symlink_to(tmp_path / "template.jinja")
    report = verify(sharded)
    checks = {c["check"]: c for c in report["checks"]}
    assert checks["self-contained"]["ok"] is False
    assert "chat_template.jinja is a link to" in checks["self-contained"]["message"]


def test_a_self_contained_sharded_model_verifies(sharded: Path, tiny_model: Path, thub: Run) -> None:
    link = sharded / "also-config.json"  # a link inside the folder is fine
    link.symlink_to("config.json")
    done = thub("checkpoint", "verify", str(sharded), "--source", str(tiny_model), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    checks = {c["check"]: c for c in json.loads(done.stdout)["checks"]}
    assert checks["self-contained"]["ok"] is True and checks["logits"]["ok"] is True


def test_merge_refuses_a_base_whose_index_leaves_its_folder(adapter: Path, sharded: Path, tmp_path: Path,
                                                            opened_outside: list[str]) -> None:
    from thub.checkpoint.merge import merge_adapter

    _move_out(sharded, lambda moved: f"../other/{moved.name}")
    with pytest.raises(UsageError, match=r"model.safetensors.index.json names '\.\./other/.*outside the folder"):
        merge_adapter(adapter, tmp_path / "merged", base=str(sharded), force=True)
    assert opened_outside == []
