#!/bin/bash
# A stand-in for a torchrun training script run under rekindle without its API (job.command): it
# reads the torchrun environment, keeps its own checkpoint (a file per rank), trains STEPS steps of
# SLEEP seconds each, resuming from its checkpoint when started again, and exits 0.
set -euo pipefail
steps=${STEPS:?}
dir=${CKPT_DIR:?}
ckpt="$dir/rank-$RANK.step"
step=0
if [ -f "$ckpt" ]; then
  step=$(cat "$ckpt")
fi
echo "start rank=$RANK local=$LOCAL_RANK world=$WORLD_SIZE local_world=$LOCAL_WORLD_SIZE" \
  "master=$MASTER_ADDR:$MASTER_PORT restart=$TORCHELASTIC_RESTART_COUNT epoch=$REKINDLE_EPOCH from=$step" \
  "cwd=$PWD" >>"$dir/starts.log"
while [ "$step" -lt "$steps" ]; do
  sleep "${SLEEP:-0.05}"
  step=$((step + 1))
  echo "$step" >"$ckpt.tmp"
  mv "$ckpt.tmp" "$ckpt"
done
echo "done rank=$RANK step=$step" >>"$dir/starts.log"
