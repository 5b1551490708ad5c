#!/usr/bin/env bash
# GPU smoke test for the verl backend (needs one NVIDIA GPU and verl[vllm] in this environment;
# not run in CI, and not yet run on a GPU). 2 steps of lora_grpo and grpo on a small model, then
# checks result.json, the metrics stream (max_steps on every line) and the exported LoRA adapter.
# Usage: MODEL=/path/or/hub-id bash thub-plugin-verl/scripts/gpu_smoke.sh [workdir]
#   MODEL defaults to thub's tiny random Llama (examples/make_tiny_model.py) built with head size 64
#   (vLLM's attention kernels refuse the default 16); or a small real model, e.g.
#   MODEL=Qwen/Qwen2.5-0.5B-Instruct (cached locally).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
WORK="${1:-$(mktemp -d)}"
PY="${PYTHON:-python}"
export RAY_TMPDIR="${RAY_TMPDIR:-/tmp/ray-smoke}"   # short AF_UNIX socket paths
export VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS="${VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS:-600}"
nvidia-smi -L
nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader   # leftovers?
"$PY" -c 'import verl, vllm, torch; print("verl", verl.__version__, "vllm", vllm.__version__, "torch", torch.__version__)'
if [ -z "${MODEL:-}" ]; then
  "$PY" "$ROOT/examples/make_tiny_model.py" --out "$WORK/tiny" --head-dim 64
  MODEL="$WORK/tiny"
fi
"$PY" -m thub doctor --backend verl || true
common=(--backend verl --model-path "$MODEL" --data-path "$ROOT/examples/data/grpo.jsonl" --nproc-per-node 1
        --group-size 4 --prompt-batch-size 4 --max-tokens 32 --max-prompt-length 128
        --gpu-memory-utilization 0.3 --reward math --save-steps 1)

check() {  # run dir, expect adapter (1/0)
  "$PY" - "$@" <<'PY'
import json, sys
from pathlib import Path
out, adapter = Path(sys.argv[1]), sys.argv[2] == "1"
result = json.loads((out / "result.json").read_text())
assert result["status"] == "succeeded", result
lines = [json.loads(l) for l in (out / "training_metrics.jsonl").read_text().splitlines()]
assert [l["step"] for l in lines] == [1, 2], lines
for line in lines:
    assert line["max_steps"] == 2 and "mean_reward" in line and "timestamp" in line, line
final = Path(result["final_checkpoint"])
if adapter:
    assert (final / "adapter_config.json").exists() and final.name == "lora_adapter", result
else:
    assert final.name == "actor" and final.is_dir(), result
print(f"OK {out.name}: {len(lines)} steps, mean_reward {[l['mean_reward'] for l in lines]}, final {final}")
PY
}

"$PY" -m thub train lora_grpo "${common[@]}" --max-steps 2 --lora-r 8 --ckpt-output-dir "$WORK/lora_grpo" --json
check "$WORK/lora_grpo" 1
"$PY" -m thub.testing.smoke "$WORK/lora_grpo" --status succeeded --steps 2 --metric mean_reward --reload adapter
"$PY" -m thub train grpo "${common[@]}" --max-steps 2 --ckpt-output-dir "$WORK/grpo" --json
check "$WORK/grpo" 0
"$PY" -m thub.testing.smoke "$WORK/grpo" --status succeeded --steps 2 --metric mean_reward --reload none  # FSDP shards

# verl has no save-on-signal: interrupt after step 2 of 4 (saved by --save-steps 1), resume at step 3
"$PY" -m thub train lora_grpo "${common[@]}" --max-steps 4 --lora-r 8 --ckpt-output-dir "$WORK/resume" --json &
pid=$!
for _ in $(seq 1 1200); do [ -d "$WORK/resume/checkpoints/global_step_2" ] && break; sleep 0.5; done
kill -INT "$pid"
wait "$pid" || true
"$PY" -m thub.testing.smoke "$WORK/resume" --status interrupted --metric mean_reward --reload none
"$PY" -m thub train lora_grpo "${common[@]}" --max-steps 4 --lora-r 8 --ckpt-output-dir "$WORK/resume" \
  --resume --json
"$PY" -m thub.testing.smoke "$WORK/resume" --status succeeded --steps 4 --metric mean_reward --reload adapter
# a batch layout verl cannot split fails in seconds, naming the nearest valid values
if "$PY" -m thub train grpo "${common[@]}" --max-steps 2 --prompt-batch-size 3 --nproc-per-node 8 --dry-run --ckpt-output-dir "$WORK/bad" 2>"$WORK/bad.err"; then
  echo "expected a divisibility error"; exit 1
fi
grep -q "nearest valid prompt_batch_size" "$WORK/bad.err"
echo "verl GPU smoke: OK ($WORK)"
