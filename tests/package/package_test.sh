#!/usr/bin/env bash
# The Debian package (docs/install.md, "Install and run as a service"): built by CPack from
# the build tree as it is (no rebuild), then checked twice.
#   1. Always: its control data (name, version, Depends from dpkg-shlibdeps, each of them
#      installed here), its file list, and a copy extracted with dpkg-deb -x: the binary's
#      --version, the unit's ExecStart, systemd-analyze verify of that unit; and
#      `cmake --install --prefix` into a temporary directory, its unit verified.
#   2. As root, when no vidline package is installed already: dpkg -i into the live system,
#      the installed binary's --version, the files in place, the vidline user, the
#      installed unit verified, then dpkg --purge and the files gone. (The user and
#      /var/lib/vidline stay after a purge, as Debian keeps them.) CI runs as root on a
#      throwaway machine; VIDLINE_TEST_NO_INSTALL=1 keeps a machine's dpkg untouched.
# Usage: package_test.sh BUILD_DIR
set -euo pipefail
build=$1
tmp=$(mktemp -d /tmp/vl-package-XXXXXX)
installed=0
cleanup() {
  if ((installed)); then dpkg --purge vidline >/dev/null 2>&1 || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# Verifies a unit template through an instance of it; any complaint fails.
verify_unit() {  # DIR_WITH_TEMPLATE
  local out
  if ! out=$(systemd-analyze verify "$1/vidline-node@host_a.service" 2>&1) || [ -n "$out" ]; then
    echo "$out" >&2
    fail "systemd-analyze verify $1/vidline-node@.service"
  fi
}

version=$(sed -n 's/.*version_string = "\([^"]*\)".*/\1/p' "$build/generated/vidline/version.hpp")
[ -n "$version" ] || fail "no version in $build/generated/vidline/version.hpp"
arch=$(dpkg --print-architecture)
if ! cpack --config "$build/CPackConfig.cmake" -G DEB -B "$tmp/out" >"$tmp/cpack.log" 2>&1; then
  cat "$tmp/cpack.log" >&2
  fail "cpack"
fi
deb="$tmp/out/vidline_${version}_${arch}.deb"
[ -f "$deb" ] || fail "cpack made no $deb: $(ls "$tmp/out")"
echo "== $deb: $(stat -c %s "$deb") bytes"

# -- 1. the package as a file ------------------------------------------------------------
[ "$(dpkg-deb -f "$deb" Package)" = vidline ] || fail "Package is not vidline"
[ "$(dpkg-deb -f "$deb" Version)" = "$version" ] || fail "Version is not $version"
depends=$(dpkg-deb -f "$deb" Depends)
echo "== Depends: $depends"
for need in adduser libc6 libstdc++6 libcaf-core libzmq5 libsqlite3-0 libssl3 libsystemd0 \
            libspdlog; do
  [[ ", $depends" == *", $need"* ]] || fail "Depends lacks $need"
done
# Each dependency is installed here, or provided by an installed package (libspdlog1.10
# provides libspdlog1.10-fmt9): so dpkg -i would not refuse the package.
provided=" $(dpkg-query -W -f='${db:Status-Abbrev}|${Package} ${Provides}\n' |
             sed -n 's/^ii *|//p' | sed -E 's/ \([^)]*\)//g; s/,/ /g' | tr '\n' ' ') "
IFS=',' read -ra deps <<<"$depends"
for d in "${deps[@]}"; do
  name=$(sed -E 's/^ *//; s/[ (].*//' <<<"$d")
  [[ "$provided" == *" $name "* ]] ||
    fail "dependency $name is neither installed nor provided here: dpkg -i would refuse it"
done
files=(usr/bin/vidline usr/lib/systemd/system/vidline-node@.service
       usr/share/doc/vidline/README.md usr/share/doc/vidline/install.md
       usr/share/doc/vidline/config.md usr/share/doc/vidline/PROTOCOL.md
       usr/share/doc/vidline/examples/reference.json
       usr/share/doc/vidline/examples/two_hosts_small.json)
listing=$(dpkg-deb -c "$deb")
for f in "${files[@]}"; do
  grep -qE " \./$f\$" <<<"$listing" || fail "the package lacks /$f"
done
for s in postinst prerm postrm; do
  dpkg-deb -I "$deb" "$s" >/dev/null 2>&1 || fail "the package has no $s"
done
dpkg-deb -I "$deb" postinst | grep -q "adduser --system" || fail "postinst creates no system user"

root="$tmp/root"
dpkg-deb -x "$deb" "$root"
got=$("$root/usr/bin/vidline" --version) || fail "extracted vidline --version failed"
[ "$got" = "vidline $version" ] || fail "extracted vidline --version: '$got'"
unit="$root/usr/lib/systemd/system/vidline-node@.service"
grep -qx 'ExecStart=/usr/bin/vidline node --config /etc/vidline/cluster.json --host %i' "$unit" ||
  fail "the packaged unit does not start /usr/bin/vidline"
mkdir -p "$tmp/unit"
sed "s#^ExecStart=/usr/bin/vidline #ExecStart=$root/usr/bin/vidline #" "$unit" \
  >"$tmp/unit/vidline-node@.service"
verify_unit "$tmp/unit"
echo "== extracted package: files, --version and unit ok"

# -- cmake --install under another prefix: the same files, ExecStart at that prefix -------
prefix="$tmp/prefix"
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log" >&2; fail "cmake --install"; }
for f in "${files[@]}"; do
  [ -e "$prefix/${f#usr/}" ] || fail "cmake --install put no $prefix/${f#usr/}"
done
grep -q "^ExecStart=$prefix/bin/vidline node " "$prefix/lib/systemd/system/vidline-node@.service" ||
  fail "cmake --install's unit does not start $prefix/bin/vidline"
verify_unit "$prefix/lib/systemd/system"
echo "== cmake --install --prefix: files and unit ok"

# -- 2. installed for real --------------------------------------------------------------
if [ "$(id -u)" != 0 ] || [ -n "${VIDLINE_TEST_NO_INSTALL:-}" ]; then
  echo "== not installing into this system (not root, or VIDLINE_TEST_NO_INSTALL)"
  exit 0
fi
if dpkg-query -W -f='${Status}' vidline 2>/dev/null | grep -q installed; then
  echo "== a vidline package is installed already: left alone, not installing over it"
  exit 0
fi
installed=1
dpkg -i "$deb" >"$tmp/dpkg.log" 2>&1 || { cat "$tmp/dpkg.log" >&2; fail "dpkg -i"; }
for f in "${files[@]}"; do
  [ -e "/$f" ] || fail "installed package lacks /$f"
done
got=$(/usr/bin/vidline --version) || fail "installed vidline --version failed"
[ "$got" = "vidline $version" ] || fail "installed vidline --version: '$got'"
getent passwd vidline >/dev/null || fail "postinst made no vidline user"
[ "$(id -gn vidline)" = vidline ] || fail "the vidline user's group is not vidline"
[ -d /etc/vidline ] || fail "postinst made no /etc/vidline"
verify_unit /usr/lib/systemd/system
dpkg --purge vidline >"$tmp/dpkg.log" 2>&1 || { cat "$tmp/dpkg.log" >&2; fail "dpkg --purge"; }
installed=0
for f in "${files[@]}"; do
  [ ! -e "/$f" ] || fail "/$f is still there after dpkg --purge"
done
echo "== installed with dpkg -i, checked, purged"
