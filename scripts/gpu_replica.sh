#!/usr/bin/env bash
# The GPU check of docs/replica.md: the user's path (info, validate, two epochs of the
# default ranker and of the official baseline, evaluate, submit) on the largest replica
# graphs of layout:xla:random, on CUDA and then on the same machine's CPU, with each
# step's wall time, last epoch's time, peak RSS and peak GPU allocation side by side.
#
#   scripts/gpu_replica.sh OUT
#
# Run from the repository root on a machine with a GPU and PyTorch built with CUDA;
# graphcost need not be installed (the checkout goes on PYTHONPATH), but its
# dependencies must be. The CPU run reuses the CUDA run's replica files.
set -euo pipefail
out=${1:?usage: scripts/gpu_replica.sh OUT}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
python3 -c 'import torch; print("torch", torch.__version__, "on", torch.cuda.get_device_name(0))'
nproc
# 2 train and 2 valid graphs (each split's largest, 43,615 nodes, among them) and the
# whole test split; configs capped at 2,000 per graph: a step samples 32 per graph, so
# training and GPU memory do not grow with the file's 100,040; 6 steps per epoch
args=(layout:xla:random --graphs 2 --max-configs 2000 --epochs 2 --set steps_per_epoch=6)
python3 -m graphcost bench replica "${args[@]}" --device cuda --out "$out/cuda" --keep
mkdir -p "$out/cpu" && cp -r "$out/cuda/data" "$out/cpu/"
python3 -m graphcost bench replica "${args[@]}" --device cpu --out "$out/cpu"
python3 - "$out" <<'PY'
import json, sys
rows = {d: json.load(open(f"{sys.argv[1]}/{d}/replica.json"))["layout:xla:random"]
        ["caches"]["compact"] for d in ("cuda", "cpu")}
print(f"{'step':<24} {'wall s cuda/cpu':>16} {'last epoch s':>14} {'peak RSS MB':>13} "
      "peak GPU MB")
cpu = {s["step"]: s for s in rows["cpu"]["steps"]}
for g in rows["cuda"]["steps"]:
    c = cpu.get(g["step"])
    if c is None:
        print(f"{g['step']:<24} on CUDA only")
        continue
    ep = (f"{g['epoch_s']:.1f}/{c['epoch_s']:.1f}" if g["epoch_s"] is not None
          and c["epoch_s"] is not None else "")
    gpu = "" if g["peak_gpu_mb"] is None else f"{g['peak_gpu_mb']:.0f}"
    print(f"{g['step']:<24} {g['seconds']:>7.1f}/{c['seconds']:<8.1f} {ep:>14} "
          f"{g['peak_rss_mb']:>6.0f}/{c['peak_rss_mb']:<6.0f} {gpu:>8}")
PY
