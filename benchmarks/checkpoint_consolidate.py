"""Consolidation of a sharded checkpoint: `thub checkpoint consolidate` against torch's own
converter on the same FSDP2 DCP checkpoint, peak RSS and wall as ratios in one run.

    python benchmarks/checkpoint_consolidate.py [--layers 24] [--work DIR]

The model is a ~0.5 B-parameter random Llama built here from a config (hidden 1024, 24 layers,
MLP 4096, vocabulary 64,000, untied: 2 GB of float32), sharded by 2 gloo processes with FSDP2
and saved with ``torch.distributed.checkpoint`` (examples/write_fsdp2_dcp.py), as bf16-mixed
training holds it: float32 weights, config dtype bfloat16 (the training dtype). Then, each in its
own process (peak RSS from ``wait4``, the process and what it waited for):

* converter: torch's ``dcp_to_torch_save`` to a ``.pt`` file, then that file loaded and saved as
  HF safetensors in the training dtype (what a user runs to get a servable folder);
* thub: ``thub checkpoint consolidate DCP --out DIR --base CONFIG`` (the whole CLI process).

Both outputs are then compared tensor for tensor (not timed). Issue 27's goal: peak RSS
<= 0.3x the converter's, wall <= 1.2x. The recorded figures live in docs/checkpoints.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _measure import run_once  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

CONVERTER = textwrap.dedent("""
    import sys, torch
    from safetensors.torch import save_file
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    dcp, pt, out = sys.argv[1:4]
    dcp_to_torch_save(dcp, pt)
    state = torch.load(pt, weights_only=True)
    save_file({k: v.to(torch.bfloat16).contiguous() for k, v in state.items()}, out, metadata={"format": "pt"})
""")

COMPARE = textwrap.dedent("""
    import json, sys, torch
    from safetensors import safe_open
    ref, folder = sys.argv[1], sys.argv[2]
    index = json.load(open(folder + "/model.safetensors.index.json"))["weight_map"]
    with safe_open(ref, "pt") as theirs:
        assert set(theirs.keys()) == set(index), "different tensor names"
        for name, file in index.items():
            with safe_open(folder + "/" + file, "pt") as ours:
                a, b = theirs.get_tensor(name), ours.get_tensor(name)
                assert a.dtype == b.dtype and torch.equal(a, b), name
    print(len(index))
""")


def _config(folder: Path, layers: int) -> None:
    from transformers import LlamaConfig

    LlamaConfig(hidden_size=1024, intermediate_size=4096, num_hidden_layers=layers, num_attention_heads=16,
                num_key_value_heads=8, vocab_size=64000, tie_word_embeddings=False,
                dtype="bfloat16").save_pretrained(folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--work", default=None, help="work folder (default: a temporary one, removed at the end)")
    args = parser.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="thub-consolidate-bench-"))
    try:
        config, dcp = work / "config", work / "dcp"
        _config(config, args.layers)
        subprocess.run([sys.executable, str(ROOT / "examples" / "write_fsdp2_dcp.py"), "--config", str(config),
                        "--out", str(dcp), "--nproc", "2"], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        theirs_wall, theirs_rss = run_once([sys.executable, "-c", CONVERTER, str(dcp), str(work / "model.pt"),
                                            str(work / "converter.safetensors")])
        (work / "model.pt").unlink()
        ours_wall, ours_rss = run_once([sys.executable, "-m", "thub", "checkpoint", "consolidate", str(dcp),
                                        "--out", str(work / "thub"), "--base", str(config),
                                        "--max-shard-size", "500MB"])
        summary = json.loads((work / "thub" / "model.safetensors.index.json").read_text())
        checked = subprocess.run([sys.executable, "-c", COMPARE, str(work / "converter.safetensors"),
                                  str(work / "thub")], check=True, capture_output=True, text=True).stdout.strip()
        params = summary["metadata"]["total_size"] // 2
        print(f"model: {params / 1e9:.2f} B parameters ({args.layers} layers), DCP from 2 FSDP2 ranks, "
              f"float32 stored, bfloat16 written; outputs equal tensor for tensor ({checked} tensors)")
        print(f"{'':12}{'peak RSS MiB':>14}{'wall s':>10}")
        print(f"{'converter':12}{theirs_rss:>14.0f}{theirs_wall:>10.1f}")
        print(f"{'thub':12}{ours_rss:>14.0f}{ours_wall:>10.1f}")
        print(f"ratio thub/converter: peak RSS {ours_rss / theirs_rss:.2f}x (goal <= 0.3x), "
              f"wall {ours_wall / theirs_wall:.2f}x (goal <= 1.2x)")
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
