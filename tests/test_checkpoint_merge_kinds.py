"""``merge_adapter`` on every LoRA kind PEFT saves (LoRA, DoRA, rsLoRA; a QLoRA adapter's model card), on a float32 and
a bfloat16 base, each verified by ``verify`` (logits within the stated tolerance of the adapter on its base)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from thub.checkpoint.merge import merge_adapter, plan_merge
from thub.checkpoint.verify import TOLERANCE, verify
from thub.errors import UsageError

pytestmark = pytest.mark.needs_module("peft", "safetensors")


def _adapter(base: Path, out: Path, **lora: Any) -> Path:
    """A PEFT adapter saved by PEFT, its B matrices not zero (init_lora_weights=False), so merging changes the model."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base)
    config = LoraConfig(r=4, target_modules=["q_proj", "v_proj", "down_proj"], init_lora_weights=False, **lora)
    get_peft_model(model, config).save_pretrained(out)
    return out


def _bf16_base(tiny_model: Path, out: Path) -> Path:
    import torch
    from transformers import AutoModelForCausalLM

    shutil.copytree(tiny_model, out)
    AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.bfloat16).save_pretrained(out)
    return out


@pytest.mark.parametrize("kind", [{}, {"use_dora": True}, {"use_rslora": True}], ids=["lora", "dora", "rslora"])
def test_every_lora_kind_merges_and_verifies(kind: dict[str, bool], tiny_model: Path, tmp_path: Path) -> None:
    import torch
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    adapter = _adapter(tiny_model, tmp_path / "adapter", **kind)
    done = merge_adapter(adapter, tmp_path / "merged")
    assert done["use_dora"] is bool(kind.get("use_dora")) and done["use_rslora"] is bool(kind.get("use_rslora"))
    assert done["tokenizer_from"] == str(tiny_model)  # the adapter has no tokenizer files: the base's
    expected = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model), adapter).merge_and_unload()
    saved = load_file(str(tmp_path / "merged" / "model.safetensors"))
    assert all(torch.equal(saved[n], t) for n, t in expected.state_dict().items())
    report = verify(tmp_path / "merged")
    assert report["ok"], report["failed"]
    assert [c["ok"] for c in report["checks"]] == [True] * 8  # the seven checks and the merge's manifest


def test_a_bfloat16_base_merges_in_bfloat16_within_its_tolerance(tiny_model: Path, tmp_path: Path) -> None:
    base = _bf16_base(tiny_model, tmp_path / "base")
    adapter = _adapter(base, tmp_path / "adapter")
    assert plan_merge(adapter, tmp_path / "merged")["dtype"] == "bfloat16"
    merge_adapter(adapter, tmp_path / "merged")
    report = verify(tmp_path / "merged")
    logits = next(c for c in report["checks"] if c["check"] == "logits")
    assert logits["ok"] is True and f"tolerance {TOLERANCE['bfloat16']:g} for bfloat16" in logits["message"]
    assert report["dtype"] == "bfloat16"


def test_logits_check_fails_when_the_merge_lost_the_adapter(tiny_model: Path, tmp_path: Path) -> None:
    adapter = _adapter(tiny_model, tmp_path / "adapter")
    merge_adapter(adapter, tmp_path / "merged")
    # the base's weights where the merge should be: a merge that silently did nothing
    shutil.copy(tiny_model / "model.safetensors", tmp_path / "merged" / "model.safetensors")
    report = verify(tmp_path / "merged")
    assert report["failed"]["check"] == "logits"
    assert "max |logit difference|" in report["failed"]["message"] and "tolerance 0.0001" in report["failed"]["message"]


def test_qlora_adapter_merges_into_the_unquantised_base_with_a_warning(tiny_model: Path, tmp_path: Path) -> None:
    # a QLoRA run's final adapter: thub's run record says the base was loaded in 4 bits (bitsandbytes needs
    # a GPU, so the adapter itself is trained here unquantised; PEFT 0.21 records no quantisation in it)
    run = tmp_path / "run"
    run.mkdir()
    (run / "thub_run.json").write_text(json.dumps({"parameters": {"load_in_4bit": {"value": True,
                                                                                   "source": "flag --load-in-4bit"}}}))
    adapter = _adapter(tiny_model, run / "final")
    warnings: list[str] = []
    done = merge_adapter(adapter, tmp_path / "merged", warn=warnings.append)
    assert done["qlora"] is True and len(warnings) == 1
    assert "trained on a quantised (QLoRA) base: it is merged into the unquantised" in warnings[0]
    assert json.loads((tmp_path / "merged" / "thub_merge.json").read_text())["qlora"] is True
    assert verify(tmp_path / "merged")["ok"]
    (run / "thub_run.json").write_text(json.dumps({"parameters": {"load_in_4bit": {"value": False}}}))
    assert plan_merge(adapter, tmp_path / "merged2")["warnings"] == []


def test_a_quantised_base_and_an_existing_out_are_refused_before_anything_is_written(tiny_model: Path,
                                                                                     tmp_path: Path) -> None:
    adapter = _adapter(tiny_model, tmp_path / "adapter")
    quantised = tmp_path / "q"
    shutil.copytree(tiny_model, quantised)
    config = json.loads((quantised / "config.json").read_text())
    config["quantization_config"] = {"load_in_4bit": True, "quant_method": "bitsandbytes"}
    (quantised / "config.json").write_text(json.dumps(config))
    with pytest.raises(UsageError, match="is stored quantised.*give the unquantised base with --base"):
        merge_adapter(adapter, tmp_path / "merged", base=str(quantised))
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="already exists and is not an empty folder"):
        merge_adapter(adapter, tmp_path / "taken")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adapter", "q", "taken"]  # no staging folder left


def test_verify_refuses_a_base_that_is_not_a_model_folder(tiny_model: Path, tmp_path: Path) -> None:
    merge_adapter(_adapter(tiny_model, tmp_path / "adapter"), tmp_path / "merged")
    (tmp_path / "notes.txt").write_text("not a model")
    for base in (tmp_path / "nothing", tmp_path / "notes.txt"):
        with pytest.raises(UsageError, match=f"--base: {base}: "):
            verify(tmp_path / "merged", base=str(base))
    # the base a merge recorded is gone: the tokenizer check says so instead of failing
    shutil.copytree(tiny_model, tmp_path / "base")
    merge_adapter(_adapter(tmp_path / "base", tmp_path / "adapter2"), tmp_path / "merged2")
    shutil.rmtree(tmp_path / "base")
    tokenizer = next(c for c in verify(tmp_path / "merged2")["checks"] if c["check"] == "tokenizer")
    assert tokenizer["ok"] is None and "is no longer there" in tokenizer["message"]


def test_a_run_s_final_model_is_compared_with_the_training_input(tiny_model: Path, tmp_path: Path) -> None:
    # a full fine-tune's final/ (no merge record): its tokenizer and template must be the input model's
    run = tmp_path / "run"
    shutil.copytree(tiny_model, run / "final")
    (run / "thub_run.json").write_text(json.dumps({"parameters": {"model_path": {"value": str(tiny_model)}}}))
    report = verify(run / "final")
    assert report["base"] == str(tiny_model) and report["ok"], report
    template = run / "final" / "chat_template.jinja"
    template.write_text(template.read_text().replace("tool_calls", "no_tool_calls"))
    report = verify(run / "final")
    assert report["failed"]["check"] == "tokenizer" and str(tiny_model) in report["failed"]["message"]


def test_an_adapter_trained_with_added_tokens_merges_into_the_resized_base(tiny_model: Path, tmp_path: Path) -> None:
    # a run that added tokens resizes the embeddings and trains them in full (modules_to_save): the adapter's
    # tokenizer is longer than the base's vocabulary, so the base is resized first, as training did
    import torch
    from peft import LoraConfig, get_peft_model
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    tokenizer.add_tokens(["<think>", "</think>"])
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    model.resize_token_embeddings(len(tokenizer))
    config = LoraConfig(r=4, target_modules=["q_proj"], init_lora_weights=False,
                        modules_to_save=["embed_tokens", "lm_head"])
    adapter = tmp_path / "adapter"
    get_peft_model(model, config).save_pretrained(adapter)
    tokenizer.save_pretrained(adapter)
    done = merge_adapter(adapter, tmp_path / "merged")
    assert done["tokenizer_from"] == str(adapter)
    saved = load_file(str(tmp_path / "merged" / "model.safetensors"))
    assert saved["model.embed_tokens.weight"].shape[0] == len(tokenizer)
    assert json.loads((tmp_path / "merged" / "config.json").read_text())["vocab_size"] == len(tokenizer)
    logits = next(c for c in verify(tmp_path / "merged")["checks"] if c["check"] == "logits")
    assert logits["ok"] is True, logits
    assert torch.isfinite(saved["lm_head.weight"]).all()


def test_verify_reads_torch_bin_weights(tiny_model: Path, tmp_path: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    model.config.save_pretrained(tmp_path / "bin")
    state = model.state_dict()
    torch.save(state, tmp_path / "bin" / "pytorch_model.bin")
    report = verify(tmp_path / "bin")
    checks = {c["check"]: c for c in report["checks"]}
    assert checks["shapes"]["ok"] and checks["finite"]["ok"], checks
    state["model.norm.weight"] = torch.full_like(state["model.norm.weight"], float("inf"))
    torch.save(state, tmp_path / "bin" / "pytorch_model.bin")
    report = verify(tmp_path / "bin")
    assert report["failed"]["check"] == "finite" and "model.norm.weight" in report["failed"]["message"]
