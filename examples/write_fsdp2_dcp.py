#!/usr/bin/env python3
"""Write a sharded torch DCP checkpoint of a Hugging Face causal LM the way FSDP2 training does:
N CPU processes over gloo, ``fully_shard`` on every decoder layer and the root
(torch.distributed.fsdp), then ``torch.distributed.checkpoint.save`` of the sharded state dict.

    python examples/write_fsdp2_dcp.py --model examples/tiny --out /tmp/dcp
    python examples/write_fsdp2_dcp.py --config CONFIG_DIR --out DIR   # random weights from a config
    python examples/write_fsdp2_dcp.py --model M --out DIR --nest accelerate   # OUT/pytorch_model_fsdp_0
    python examples/write_fsdp2_dcp.py --model M --out DIR --nest optimizer    # {"model": sd, "optim": ...}

``--nest accelerate`` saves with accelerate's own ``save_fsdp_model`` (SHARDED_STATE_DICT:
``OUT/pytorch_model_fsdp_0/`` holding ``{"model": state_dict}``); ``--nest optimizer`` adds AdamW's
state after one step, as a training loop's checkpoint holds. The tests and
benchmarks/checkpoint_consolidate.py build their sharded checkpoints with this script.
"""

from __future__ import annotations

import argparse
import os
import socket


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _worker(rank: int, world: int, port: int, args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.fsdp import fully_shard
    from transformers import AutoConfig, AutoModelForCausalLM

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(args.seed)  # the same random weights on every rank, as from_pretrained would give
    if args.model:
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=getattr(torch, args.dtype))
    else:
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(args.config),
                                                 dtype=getattr(torch, args.dtype))
    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model)
    if args.nest == "accelerate":
        _save_as_accelerate(model, args.out)
        dist.barrier()
        dist.destroy_process_group()
        return
    state: dict[str, object] = dict(model.state_dict())
    if args.nest == "optimizer":
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        ids = torch.randint(0, model.config.vocab_size, (1, 8))
        model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        state = {"model": model.state_dict(), "optim": get_optimizer_state_dict(model, optimizer)}
    dcp.save(state, checkpoint_id=args.out)
    dist.barrier()
    dist.destroy_process_group()


def _save_as_accelerate(model: object, out: str) -> None:
    """accelerate's own writer (``save_fsdp_model``, what ``Accelerator.save_state`` and the HF Trainer
    call under FSDP) with an FSDP2 SHARDED_STATE_DICT plugin: ``OUT/pytorch_model_fsdp_0/``. The model
    is sharded by ``fully_shard`` above because accelerate turns FSDP on only on accelerators
    (accelerate/state.py: DistributedType.FSDP for MULTI_GPU/NPU/XPU/..., never MULTI_CPU)."""
    from accelerate import PartialState
    from accelerate.utils import FullyShardedDataParallelPlugin, save_fsdp_model

    PartialState(cpu=True)  # accelerate's logging needs its state (it finds the gloo group initialised)
    plugin = FullyShardedDataParallelPlugin(fsdp_version=2, state_dict_type="SHARDED_STATE_DICT")
    save_fsdp_model(plugin, None, model, out)  # the accelerator is read only for FULL/LOCAL state dicts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", help="a Hugging Face model folder (its weights are sharded)")
    source.add_argument("--config", help="a folder with config.json (random weights, --seed)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--nest", default="none", choices=["none", "accelerate", "optimizer"])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    import torch.multiprocessing as mp

    mp.spawn(_worker, args=(args.nproc, _free_port(), args), nprocs=args.nproc, join=True)


if __name__ == "__main__":
    main()
