#!/usr/bin/env bash
# A decoder for the exec backend's tests that writes a real video with ffmpeg: FRAMES frames
# of ffmpeg's test pattern at FPS, WIDTH x HEIGHT, H.264 in MP4, with a square whose colour
# is taken from the latent's SHA-256, so every latent makes another video. It checks the
# latent's SHA-256 first and writes nothing when it differs (exit 65).
#
#   ffmpeg_video.sh LATENT LATENT_SHA256 FRAMES FPS WIDTH HEIGHT OUTPUT
set -euo pipefail
[ $# -eq 7 ] || { echo "usage: $0 LATENT SHA256 FRAMES FPS W H OUTPUT" >&2; exit 2; }
latent=$1 want=$2 frames=$3 fps=$4 w=$5 h=$6 out=$7
got=$(sha256sum <"$latent" | cut -d' ' -f1)
if [ "$got" != "$want" ]; then
  echo "latent $latent hashed to $got, expected $want" >&2
  exit 65
fi
ffmpeg -v error -nostdin -y -f lavfi -i "testsrc=size=${w}x${h}:rate=${fps}" \
  -vf "drawbox=x=0:y=0:w=iw/2:h=ih/2:color=0x${got:0:6}:t=fill" \
  -frames:v "$frames" -c:v libx264 -pix_fmt yuv420p -threads 1 -f mp4 "$out.part"
mv "$out.part" "$out"
