#!/usr/bin/env python3
"""Write a DeepSpeed ZeRO checkpoint of a Hugging Face causal LM on CPU: N gloo processes
(DeepSpeed's CPU accelerator), ``deepspeed.initialize`` with ZeRO stage 1, 2 or 3 and AdamW, one
training step, then ``engine.save_checkpoint`` (``OUT/latest``, ``OUT/global_step1/``,
``OUT/zero_to_fp32.py``), the layout a ZeRO run of the HF Trainer or LLaMA-Factory leaves.

    PYTHONPATH=build/deepspeed-0.19.8 python examples/write_deepspeed_zero.py --model examples/tiny \\
        --out /tmp/zero3 --stage 3

DeepSpeed is not installed into the project's venv; scripts/test-all.sh unpacks it into
build/deepspeed-0.19.8 (its CPU accelerator compiles one C++ op, deepspeed_shm_comm, on first use).
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys


def _worker(model_path: str, out: str, stage: int, freeze: bool) -> None:
    import deepspeed
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_path)
    if freeze:  # frozen parameters are saved apart (frozen_param_shapes/fragments), as in partial fine-tuning
        model.get_input_embeddings().requires_grad_(False)
    config = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": stage},
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}}}
    engine, _optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    ids = torch.randint(0, model.config.vocab_size, (1, 16))
    engine.backward(engine(input_ids=ids, labels=ids).loss)
    engine.step()
    engine.save_checkpoint(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--stage", type=int, choices=[1, 2, 3], default=3)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--freeze-embeddings", action="store_true", help="train every parameter but the embeddings")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _worker(args.model, args.out, args.stage, args.freeze_embeddings)
        return
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "DS_ACCELERATOR": "cpu"}
    subprocess.run([sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={args.nproc}",
                    f"--master_port={port}", __file__, "--worker", "--model", args.model, "--out", args.out,
                    "--stage", str(args.stage), *(["--freeze-embeddings"] if args.freeze_embeddings else [])],
                   check=True, env=env)


if __name__ == "__main__":
    main()
