"""Translation (pure: what ``--dry-run`` shows) and the TRL training loop (the training child only)."""

from __future__ import annotations

from typing import Any

from thub.backend import RunContext, metrics_callback


def translate(algorithm: str, params: dict[str, Any]) -> dict[str, Any]:
    """The ``DPOConfig`` the runner builds, from thub's validated parameters."""
    config: dict[str, Any] = {
        "output_dir": f"{params['ckpt_output_dir']}/checkpoints",
        "beta": params["beta"],
        "max_length": params["max_seq_len"],
        "learning_rate": params["learning_rate"],
        "per_device_train_batch_size": params["effective_batch_size"],
        "seed": params["seed"],
        "logging_steps": params["logging_steps"],
        "save_strategy": "steps" if params.get("save_steps") else "no",
        "use_cpu": True,
        "report_to": [],
        "disable_tqdm": True,
    }
    for key in ("max_steps", "save_steps"):
        if params.get(key):
            config[key] = params[key]
    return {"config": config, "model": params["model_path"]}


def run(context: RunContext) -> dict[str, Any]:
    """Train with TRL's DPOTrainer on the rows thub validated (``better`` -> chosen, ``worse`` -> rejected)."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DPOConfig, DPOTrainer

    plan = translate(context.algorithm, context.params)
    tokenizer = AutoTokenizer.from_pretrained(plan["model"])
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    rows = [{"prompt": row["prompt"], "chosen": row["better"], "rejected": row["worse"]}
            for row in context.data().rows]
    trainer = DPOTrainer(model=AutoModelForCausalLM.from_pretrained(plan["model"]), args=DPOConfig(**plan["config"]),
                         train_dataset=Dataset.from_list(rows), processing_class=tokenizer,
                         callbacks=[metrics_callback(context)])
    trainer.train(resume_from_checkpoint=context.resume_from)
    if context.stop_requested:
        latest = context.run_dir.latest_checkpoint()
        return {"interrupted": True, "final_checkpoint": str(latest[0]) if latest else None}
    final = None
    if context.params["save_final_checkpoint"]:
        final = str(context.run_dir.path / "final")
        trainer.save_model(final)
        tokenizer.save_pretrained(final)
        context.checkpoint(final, trainer.state.global_step)
    return {"final_checkpoint": final, "summary": {"global_step": trainer.state.global_step}}
