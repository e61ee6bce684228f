# Shared by launch/*: install what is missing (Debian packages only), then build into build/.
# Sourced, not run.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

packages=(g++ cmake make pkg-config libcaf-dev cppzmq-dev libzmq3-dev libmsgpack-cxx-dev
          libspdlog-dev libssl-dev catch2 libsqlite3-dev libcli11-dev nlohmann-json3-dev
          iproute2 nftables iperf3 libcpp-httplib-dev
          python3-torch ffmpeg libsystemd-dev systemd dpkg-dev chromium libarchive-dev)
# launch/fuzz's too: clang and libFuzzer's runtime (the suite replays the seeds with g++).
fuzz_packages=(clang-14 libclang-rt-14-dev)

# install_missing [EXTRA_PACKAGE...]: the packages above and these, where not installed.
install_missing() {
  local missing=()
  for p in "${packages[@]}" "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    echo "== installing: ${missing[*]}"
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
}

build() {
  echo "== building into build/ (log: build/build.log)"
  mkdir -p "$root/build"
  local log="$root/build/build.log"
  if ! { cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo &&
         cmake --build "$root/build" -j"$(nproc)"; } >"$log" 2>&1; then
    tail -60 "$log"
    echo "== build failed (full log: $log)"
    exit 1
  fi
}
