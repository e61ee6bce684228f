#!/usr/bin/env bash
# Writes the latent of a job exactly as docs/sim-contract.md fixes it
# (the `sim` contract), for the exec backend's tests: a real child process doing the work.
#
#   sim_latent.sh SEED WIDTH HEIGHT SECONDS OUTPUT [CONDITIONING PROMPT_FILE]
#
# block(i) = SHA-256("vidline-sim-latent" || u64le(seed) || u32le(w) || u32le(h)
#                    || u32le(s) || u64le(i)); latent = block(0) || block(1) || ...,
# truncated to round(13,000,000 x w x h x s / (416 x 736 x 5)) bytes.
# With CONDITIONING and PROMPT_FILE it first checks that the conditioning names the
# prompt's SHA-256, as the sim sampler does (exit 65 when not).
#
# Bash and coreutils only. Each block is one small file and one sha256sum line, hashed a
# thousand files per sha256sum call: fine for the small jobs of tests (a 16x16x1 latent is
# 2174 bytes), slow for real sizes (a 416x736x5 latent takes minutes). Seeds below 2^63.
set -euo pipefail
[ $# -eq 5 ] || [ $# -eq 7 ] || { echo "usage: $0 SEED W H S OUTPUT [CONDITIONING PROMPT_FILE]" >&2; exit 2; }
seed=$1 w=$2 h=$3 s=$4 out=$5
for v in "$seed" "$w" "$h" "$s"; do
  [[ $v =~ ^[0-9]+$ ]] || { echo "not a number: $v" >&2; exit 2; }
done

if [ $# -eq 7 ]; then
  want=$(sha256sum <"$7" | cut -d' ' -f1)
  got=$(sed -n 's/^prompt_sha256 \([0-9a-f]\{64\}\)$/\1/p' "$6")
  [ "$got" = "$want" ] || { echo "conditioning $6 is for prompt '$got', not this job's $want" >&2; exit 65; }
fi

ref=$((416 * 736 * 5))
length=$(( (2 * 13000000 * w * h * s + ref) / (2 * ref) ))
blocks=$(( (length + 31) / 32 ))

le() {  # le VALUE BYTES: sets LE to VALUE's little-endian \xHH escapes (no subshell)
  local v=$1 n=$2 k
  LE=""
  for ((k = 0; k < n; k++)); do printf -v LE '%s\\x%02x' "$LE" $(( (v >> (8 * k)) & 255 )); done
}
prefix="vidline-sim-latent"
for f in "$seed 8" "$w 4" "$h 4" "$s 4"; do
  le $f
  prefix+=$LE
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/sim-latent.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
part="$out.part"
: >"$part"
chunk=1000
for ((first = 0; first < blocks; first += chunk)); do
  last=$(( first + chunk < blocks ? first + chunk : blocks ))
  files=()
  for ((i = first; i < last; i++)); do
    le "$i" 8
    printf "$prefix$LE" >"$tmp/$i"
    files+=("$tmp/$i")
  done
  i=$first
  while read -r hex _; do
    n=$(( length - 32 * i < 32 ? length - 32 * i : 32 ))
    esc=""
    for ((j = 0; j < 2 * n; j += 2)); do esc+="\\x${hex:j:2}"; done
    printf "$esc" >>"$part"
    i=$((i + 1))
  done < <(sha256sum "${files[@]}")
  rm -f "${files[@]}"
done
mv "$part" "$out"
