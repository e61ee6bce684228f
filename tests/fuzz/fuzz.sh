# Used by launch/fuzz: build the libFuzzer targets with clang,
# run one on its corpus for a while, count what it found. Sourced, not run.
#
# Each run reads the committed seeds (tests/fuzz/<target>/, never written to) and keeps
# what it learns in <build dir>/corpus/<target>/; crashes, leaks, timeouts and
# out-of-memory inputs land in <build dir>/artifacts/<target>/ (the findings).

fuzz_src=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
fuzz_targets=(frame template config)  # the slowest last
# launch/fuzz runs only these when FUZZ_TARGETS is set (e.g. "config", to run targets in
# parallel from separate shells).
if [ -n "${FUZZ_TARGETS:-}" ]; then read -r -a fuzz_targets <<<"$FUZZ_TARGETS"; fi
fuzz_cxx=${FUZZ_CXX:-clang++-14}

# Recoverable UBSan checks halt too; ubsan.supp lists the one known third-party report.
# (To reproduce a finding by hand, export this first.)
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$fuzz_src/ubsan.supp"

# Inputs longer than this are not generated (the seeds fit).
declare -A fuzz_max_len=([frame]=4096 [config]=8192 [template]=8192)
# Extra libFuzzer flags per target. config: the entropic power schedule's bookkeeping took
# most of each execution (perf: 21% in InputCorpus::UpdateFeatureFrequency with a corpus of
# ~1100 inputs of up to 3 KB); the vanilla schedule runs 3.7x more inputs per second
# (491 -> 1800 exec/s on a loaded machine).
declare -A fuzz_flags=([config]=-entropic=0)

# True when clang and libFuzzer's runtime are installed.
fuzz_toolchain_present() {
  command -v "$fuzz_cxx" >/dev/null 2>&1 || return 1
  local probe
  probe=$(mktemp -d)
  echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' \
    >"$probe/p.cpp"
  local rc=0
  "$fuzz_cxx" -fsanitize=fuzzer,address,undefined "$probe/p.cpp" -o "$probe/p" >/dev/null 2>&1 ||
    rc=$?
  rm -rf "$probe"
  return $rc
}

# fuzz_build BUILD_DIR: configures tests/fuzz with clang and builds every target (-j2 at
# most: these machines are shared). The log is BUILD_DIR/build.log.
fuzz_build() {
  local dir=$1
  mkdir -p "$dir"
  local jobs
  jobs=$(nproc)
  ((jobs > 2)) && jobs=2
  if ! { CXX=$fuzz_cxx cmake -S "$fuzz_src" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo &&
         cmake --build "$dir" -j"$jobs"; } >"$dir/build.log" 2>&1; then
    tail -40 "$dir/build.log"
    echo "== fuzz build failed (full log: $dir/build.log)"
    return 1
  fi
}

# fuzz_run BUILD_DIR TARGET SECONDS [RUNS]: runs the target for SECONDS of wall time, or
# until it has executed RUNS inputs (0 or absent: no such limit). After a finding it
# starts again for what is left (at most 20 times), so one bug does not end the campaign.
# Findings are the artifacts written by this run. Prints "execs <n>", "findings <n>" and
# "seconds <n>"; the fuzzer's output goes to BUILD_DIR/logs/TARGET.log.
fuzz_run() {
  local dir=$1 target=$2 seconds=$3 runs=${4:-0}
  local corpus=$dir/corpus/$target artifacts=$dir/artifacts/$target log=$dir/logs/$target.log
  mkdir -p "$corpus" "$artifacts" "$dir/logs"
  : >"$log"
  local dict=()
  [ -f "$fuzz_src/$target.dict" ] && dict=(-dict="$fuzz_src/$target.dict")
  local start=$SECONDS execs=0 rounds=0
  local stamp=$dir/logs/$target.start
  touch "$stamp"  # findings of earlier runs stay in artifacts/ but are not counted
  while :; do
    local left=$((seconds - (SECONDS - start)))
    ((left > 0 && rounds < 20)) || break
    local runs_left=-1  # libFuzzer's "no limit"
    if ((runs > 0)); then
      ((execs < runs)) || break
      runs_left=$((runs - execs))
    fi
    rounds=$((rounds + 1))
    local round_log=$dir/logs/$target.round.log rc=0
    "$dir/fuzz_$target" "$corpus" "$fuzz_src/$target" "${dict[@]}" \
      -max_total_time="$left" -runs="$runs_left" -max_len="${fuzz_max_len[$target]}" \
      ${fuzz_flags[$target]:-} -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$artifacts/" \
      >"$round_log" 2>&1 || rc=$?
    cat "$round_log" >>"$log"
    local n
    n=$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "$round_log" | tail -1)
    execs=$((execs + ${n:-0}))
    ((rc == 0)) && break
    echo "   fuzz_$target: finding (exit $rc), see $log" >&2
  done
  rm -f "$dir/logs/$target.round.log"
  local findings
  findings=$(find "$artifacts" -maxdepth 1 -type f -newer "$stamp" \
               \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) |
             wc -l)
  echo "execs $execs"
  echo "findings $findings"
  echo "seconds $((SECONDS - start))"
}
