#!/usr/bin/env bash
# systemd-analyze verify on launch/vidline-node@.service as it is in the source tree, its
# ExecStart pointed at this build's binary (verify needs the binary to exist); any
# complaint fails. The packaged unit is verified by package_test.sh.
# Usage: unit_verify_test.sh SOURCE_UNIT BINARY
set -euo pipefail
tmp=$(mktemp -d /tmp/vl-unit-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
grep -q '^ExecStart=/usr/bin/vidline ' "$1" || { echo "FAIL: $1 does not start /usr/bin/vidline" >&2; exit 1; }
sed "s#^ExecStart=/usr/bin/vidline #ExecStart=$2 #" "$1" >"$tmp/vidline-node@.service"
if ! out=$(systemd-analyze verify "$tmp/vidline-node@host_a.service" 2>&1) || [ -n "$out" ]; then
  echo "$out" >&2
  echo "FAIL: systemd-analyze verify $1" >&2
  exit 1
fi
echo "== systemd-analyze verify: ok"
