#!/usr/bin/env bash
# GPU.md's first item, one device call (~5 minutes of an H100/H200): the MiniLM POI-Net step at
# 32 x 384 with PyTorch eager and torch.compile (fused AdamW) beside JAX, bf16 then f32; the same
# with --head=none (what POS + co-attention cost, both frameworks); a profile of the bf16 JAX
# step by model part; BERT-large at 32 x 384 bf16. Each table goes to $OUT/<n>-<name>.txt.
#
#   source experiments/device_setup.sh && bash bench/gpu_speed.sh     # the `run` tool's command
#   STEPS="1 2 3" bash bench/gpu_speed.sh      # some tables only (numbers as in the file names)
set -uo pipefail
OUT=${OUT:-/tmp/gpu-speed}
mkdir -p "$OUT"
S=${S:-python3 bench/train_step.py --batch=32 --seq=384}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/0-device.txt"
python3 -c "import jax, flax, torch, transformers; print('jax', jax.__version__, 'flax', \
flax.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__)" \
  | tee -a "$OUT/0-device.txt"
status=0
step() {  # NAME ARGS...: one table, its wall time on the last line (skipped if not in STEPS)
  local name=$1; shift
  [[ " ${STEPS:-1 2 3 4 5 6 7 8 9} " == *" ${name%%-*} "* ]] || return 0
  local t0=$SECONDS
  "$@" 2>&1 | grep -v -e '^WARNING' -e 'TPU' | tee "$OUT/$name.txt" || status=1
  echo "# wall $((SECONDS - t0)) s" | tee -a "$OUT/$name.txt"
}
step 1-minilm-bf16 $S --shape=minilm --steps=20 --dtype=bfloat16 \
  --torch_compile=default,reduce-overhead --profile_dir=/tmp/prof
step 2-minilm-bf16-profile python3 bench/step_profile.py /tmp/prof/bf16 --top=25
# the trace and the compiled HLO come back too, for a closer look (8 files in all)
if [ -d /tmp/prof/bf16 ]; then
  find /tmp/prof/bf16 -name '*.trace.json.gz' | head -1 | xargs -I{} cp {} "$OUT/prof-bf16.trace.json.gz"
  cp /tmp/prof/bf16/step.hlo.txt "$OUT/prof-bf16.hlo.txt"
fi
step 3-minilm-none-bf16 $S --shape=minilm --steps=20 --dtype=bfloat16 --head=none
step 4-minilm-f32 $S --shape=minilm --steps=20 --dtype=float32
step 5-bert-large-bf16 $S --shape=bert-large --steps=10 --dtype=bfloat16
# Where the head's wall time goes (2026-11-27: with the turns unrolled the head still adds 4.5 ms
# of wall time to the step but 0.4 ms of device time): the --head=none step's profile beside
# step 2's, and both steps with XLA's command buffers off (each launch on its own).
J="--shape=minilm --steps=20 --dtype=bfloat16 --no_torch --torch_compile=none"
step 6-minilm-none-bf16-jax $S $J --head=none --profile_dir=/tmp/prof0
step 7-minilm-none-bf16-profile python3 bench/step_profile.py /tmp/prof0/bf16 --top=10
if [ -d /tmp/prof0/bf16 ]; then  # its host timeline, beside step 2's
  find /tmp/prof0/bf16 -name '*.trace.json.gz' | head -1 | xargs -I{} cp {} "$OUT/prof0-none.trace.json.gz"
  cp /tmp/prof0/bf16/step.hlo.txt "$OUT/prof0-none.hlo.txt"
fi
step 8-minilm-bf16-no-command-buffers env XLA_FLAGS="--xla_gpu_enable_command_buffer=" $S $J
step 9-minilm-none-bf16-no-command-buffers env XLA_FLAGS="--xla_gpu_enable_command_buffer=" \
  $S $J --head=none
exit $status
