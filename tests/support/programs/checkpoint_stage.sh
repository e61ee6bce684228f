#!/usr/bin/env bash
# A stand-in sampler that checkpoints as docs/backends.md ("Checkpoints") asks of an `exec`
# sample command, for the exec backend's tests. Its state after step i is the lines
# "step 1" .. "step i"; its latent is the state after the last step, so a resumed run ends
# with the uninterrupted run's latent byte for byte.
#
#   checkpoint_stage.sh OUTPUT CHECKPOINT_DIR RESUME_STEP RESUME_FILE STEPS EVERY [CRASH_AFTER]
#
# Saves the state every EVERY steps to CHECKPOINT_DIR/<step>.ckpt (written to a temporary
# name, then renamed); goes on from RESUME_FILE when RESUME_STEP > 0; exits 75 (transient)
# right after step CRASH_AFTER when given. Prints "from <step>" first.
set -eu
out=$1 dir=$2 from=$3 resume=$4 steps=$5 every=$6 crash=${7:-0}
state=$(mktemp)
trap 'rm -f "$state"' EXIT
if [ "$from" -gt 0 ]; then
  cp "$resume" "$state"
else
  : >"$state"
fi
echo "from $from"
i=$from
while [ "$i" -lt "$steps" ]; do
  i=$((i + 1))
  echo "step $i" >>"$state"
  sleep 0.05
  if [ -n "$dir" ] && [ $((i % every)) -eq 0 ] && [ "$i" -lt "$steps" ]; then
    cp "$state" "$dir/.saving"
    mv "$dir/.saving" "$dir/$i.ckpt"
  fi
  if [ "$i" -eq "$crash" ]; then
    echo "crashed after step $i" >&2
    exit 75
  fi
done
cp "$state" "$out"
