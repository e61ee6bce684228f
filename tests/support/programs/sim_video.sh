#!/usr/bin/env bash
# Decodes a latent into the video file the `sim` contract fixes, for the exec backend's
# tests: it checks the latent's SHA-256 first and writes nothing when it differs (exit 65).
#
#   sim_video.sh LATENT LATENT_SHA256 SEED WIDTH HEIGHT SECONDS OUTPUT
set -euo pipefail
[ $# -eq 7 ] || { echo "usage: $0 LATENT SHA256 SEED W H S OUTPUT" >&2; exit 2; }
latent=$1 want=$2 seed=$3 w=$4 h=$5 s=$6 out=$7
got=$(sha256sum <"$latent" | cut -d' ' -f1)
if [ "$got" != "$want" ]; then
  echo "latent $latent hashed to $got, expected $want" >&2
  exit 65
fi
printf 'vidline-sim-video 1\nlatent_sha256 %s\nseed %s\nsize %sx%s\nseconds %s\n' \
  "$got" "$seed" "$w" "$h" "$s" >"$out.part"
mv "$out.part" "$out"
