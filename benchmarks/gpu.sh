#!/usr/bin/env bash
# One GPU, nothing downloaded (only the embedded default pair and the tiny
# pairs), at most about 8 minutes: the throughput table of `batchspec bench`
# on the default pair, then float16 / bfloat16 / float32 exact-match rates
# with the auditor's label for every mismatch. Results go to
# benchmarks/results/gpu-<UTC date>/ with the commands that made them.
#
#     bash benchmarks/gpu.sh            # needs: pip install -e '.[bench]' on a CUDA torch
set -euo pipefail
cd "$(dirname "$0")/.."
device="${DEVICE:-cuda}"
out="benchmarks/results/gpu-$(date -u +%Y-%m-%d)"
mkdir -p "$out"
python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device: this script is for a GPU machine')"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1  # nothing is downloaded

bench=(batchspec bench --pair default --device "$device" --dtype float32 --batch-sizes 1,4,8,16,32
       -k 4,auto --max-new-tokens 48 --repeats 3 --json "$out/bench.json" --plots "$out")
precision=(python benchmarks/precision.py --device "$device" --pairs default,tiny-llama,tiny-qwen3,tiny-glm4
           --prompts 16 --batch-size 8 --max-new-tokens 32 --json "$out/precision.json")
printf '%q ' "${bench[@]}" > "$out/commands.txt"; echo >> "$out/commands.txt"
printf '%q ' "${precision[@]}" >> "$out/commands.txt"; echo >> "$out/commands.txt"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$out/gpu.txt" || true

timeout 330 "${bench[@]}" | tee "$out/bench.txt"
timeout 150 "${precision[@]}" | tee "$out/precision.txt"
echo "results in $out"
