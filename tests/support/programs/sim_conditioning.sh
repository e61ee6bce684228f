#!/usr/bin/env bash
# Writes the conditioning file of the `sim` backend for a prompt (it names the prompt's
# SHA-256, so a sampler can tell it was given the right one).
#
#   sim_conditioning.sh PROMPT_FILE OUTPUT
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 PROMPT_FILE OUTPUT" >&2; exit 2; }
sha=$(sha256sum <"$1" | cut -d' ' -f1)
bytes=$(wc -c <"$1")
printf 'vidline-sim-conditioning 1\nprompt_sha256 %s\nprompt_bytes %s\n' "$sha" "$bytes" >"$2"
