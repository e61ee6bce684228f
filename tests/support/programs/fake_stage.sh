#!/usr/bin/env bash
# A stand-in GPU program for the exec backend's tests: one behaviour per MODE.
#
#   fake_stage.sh MODE OUTPUT [ARGS...]
#
# ok            writes OUTPUT; prints its argv, working directory and device variables
# copy_prompt   copies the file ARGS[0] (the prompt file) to OUTPUT
# fail          prints an error, exits 1              usage      exits 2
# tempfail      exits 75 (EX_TEMPFAIL)                 segv       kills itself with SIGSEGV
# hang          sleeps (in a child) until killed
# hang_hard     ignores SIGTERM, it and its child: only SIGKILL stops them
# term_trap     on SIGTERM prints "got-term" and exits 143; hangs otherwise
# oom           prints a PyTorch CUDA out-of-memory traceback, exits 1
# oom_hip       the same for ROCm: "HIP out of memory"
# oom_hang      prints the out-of-memory error, then hangs (one rank died, the rest wait)
# garbage       prints random bytes on stdout and stderr, exits 1
# no_output     exits 0 without writing OUTPUT        empty_output  writes an empty OUTPUT
# leave_child   starts a background sleep (its pid in ./child.pid), writes OUTPUT, exits 0
# slow_ok       sleeps ARGS[0] seconds, then writes OUTPUT
set -u
mode=$1 out=$2
shift 2
case $mode in
  ok)
    echo "argv: $*"
    echo "pwd: $(pwd)"
    for v in CUDA_VISIBLE_DEVICES CUDA_DEVICE_ORDER HIP_VISIBLE_DEVICES ROCR_VISIBLE_DEVICES \
             VIDLINE_STAGE VIDLINE_OWNER VIDLINE_DEVICES EXTRA; do
      echo "$v=${!v-<unset>}"
    done
    printf 'product of %s\n' "${VIDLINE_STAGE-?}" >"$out" ;;
  copy_prompt) cat "$1" >"$out" ;;
  fail) echo "RuntimeError: something broke" >&2; exit 1 ;;
  usage) echo "usage: fake_stage.sh MODE OUTPUT" >&2; exit 2 ;;
  tempfail) echo "try again later" >&2; exit 75 ;;
  segv) kill -SEGV $$ ;;
  hang) sleep 300 & wait ;;
  hang_hard) trap '' TERM; sleep 300 & wait; wait ;;
  term_trap) trap 'echo got-term >&2; exit 143' TERM; sleep 300 & wait ;;
  oom)
    cat >&2 <<'TRACE'
Traceback (most recent call last):
  File "sample.py", line 12, in <module>
    x = torch.empty(1 << 40, device="cuda")
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.06 GiB. GPU 3 has a total capacity of 15.56 GiB of which 558.62 MiB is free.
TRACE
    exit 1 ;;
  oom_hip) echo "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB" >&2; exit 1 ;;
  oom_hang) echo "torch.OutOfMemoryError: CUDA out of memory." >&2; sleep 300 & wait ;;
  garbage) head -c 4096 /dev/urandom; head -c 4096 /dev/urandom >&2; exit 1 ;;
  no_output) echo "all done (not really)"; exit 0 ;;
  empty_output) : >"$out"; exit 0 ;;
  leave_child)
    sleep 300 &
    echo $! >child.pid
    echo "made it" >"$out" ;;
  slow_ok) sleep "$1"; echo "slow product" >"$out" ;;
  *) echo "unknown mode $mode" >&2; exit 2 ;;
esac
