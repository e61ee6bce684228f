#!/usr/bin/env bash
# tests/fuzz/smoke.sh [BUILD_DIR] [SECONDS_PER_TARGET]: the short fuzz run of launch/test
# (a CTest test). Builds the libFuzzer targets into BUILD_DIR (default build-fuzz/ at
# the repository root) and runs each for SECONDS_PER_TARGET (default 20) on its corpus.
# Fails on any finding, or when a target executed nothing; exits 77 (CTest: skipped) when
# clang-14 or libFuzzer's runtime is missing (launch/common.sh installs them).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/fuzz.sh"

dir=${1:-$(cd "$fuzz_src/../.." && pwd)/build-fuzz}
seconds=${2:-20}

if ! fuzz_toolchain_present; then
  echo "fuzz smoke: skipped, $fuzz_cxx with libFuzzer's runtime is not installed"
  exit 77
fi
FUZZ_OPT=${FUZZ_OPT:--O1} fuzz_build "$dir" || exit 1

status=0
for t in "${fuzz_targets[@]}"; do
  out=$(nice -n 10 bash -c "source '$fuzz_src/fuzz.sh'; fuzz_run '$dir' '$t' '$seconds'")
  execs=$(sed -n 's/^execs //p' <<<"$out")
  findings=$(sed -n 's/^findings //p' <<<"$out")
  echo "fuzz_$t: ${execs:-0} executions in ${seconds} s, ${findings:-?} findings (log $dir/logs/$t.log)"
  if [ "${findings:-1}" != 0 ] || [ "${execs:-0}" -eq 0 ]; then
    grep -a -m5 -E "property violated|ERROR|SUMMARY" "$dir/logs/$t.log"
    echo "   reproduce: $dir/fuzz_$t $dir/artifacts/$t/<file>"
    status=1
  fi
done
exit $status
