#!/usr/bin/env bash
# A sampler for the exec backend's tests of shots that follow shots: it keeps a copy of the
# first_frame file it was given (RECORD_DIR/<index>.png, nothing when the shot has none),
# then writes the sim latent as sim_latent.sh does.
#
#   frame_sampler.sh RECORD_DIR INDEX FIRST_FRAME SEED WIDTH HEIGHT SECONDS OUTPUT
set -euo pipefail
[ $# -eq 8 ] || { echo "usage: $0 RECORD_DIR INDEX FIRST_FRAME SEED W H S OUTPUT" >&2; exit 2; }
record=$1 index=$2 frame=$3
shift 3
if [ -n "$frame" ]; then
  mkdir -p "$record"
  cp "$frame" "$record/$index.png.part"
  mv "$record/$index.png.part" "$record/$index.png"
fi
exec "$(dirname "$0")/sim_latent.sh" "$@"
