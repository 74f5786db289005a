#!/usr/bin/env bash
# Fetch "foreign" CPythons, i.e. ones this x86_64 glibc machine does not have, so tests/artifact/test_foreign_python.py
# can load the pyz's aarch64 / musl / 3.14 jq natives for real (docs/building.md, "Foreign targets").
#
#   .ci/install_foreign.sh DIR            # then: export BKMCP_FOREIGN_PYTHONS="$(cat DIR/foreign_pythons)"
#
# Everything comes from Debian's archive (apt), nothing from elsewhere:
#   aarch64-gnu-3.11   bookworm arm64 .debs (python3.11, libc6 2.36 …) unpacked into DIR/aarch64-bookworm,
#                      run by qemu-aarch64-static -L (qemu user-mode emulation, no binfmt_misc needed)
#   aarch64-gnu-3.14   sid arm64 .debs (python3.14 3.14.10, libc6 2.43 …) into DIR/aarch64-sid, the same way
#   x86_64-gnu-3.14    sid amd64 .debs into DIR/x86_64-sid, run through that sysroot's own ld.so (host glibc 2.36
#                      is too old for sid's python3.14)
#   x86_64-musl-3.11   CPython 3.11.2 built from Debian's source tarball with Debian's musl-gcc (musl 1.2.3),
#   x86_64-musl-3.9    and 3.9.2 (bullseye source), zlib 1.2.13 linked in statically; no ssl/ctypes/lzma, which
#                      the --version/--help/--dry-run paths do not need
# Each one gets a launcher script DIR/bin/python<ver>-<arch>-linux-<libc>; DIR/foreign_pythons holds them joined
# by ":" (the value for BKMCP_FOREIGN_PYTHONS).
#
# Pins: the binary .debs by exact version (apt checks them against the signed indexes); the source tarballs by
# sha256. Debian drops superseded versions (security updates, sid uploads): a pin that is gone fails with a
# clear message; FOREIGN_LATEST=1 then takes the newest version of the same packages (and prints it) until the
# pins are updated. FOREIGN_TARGETS="aarch64-gnu-3.11 x86_64-musl-3.11" limits what is installed.
#
# Needs: root (apt-get install qemu-user-static musl-tools gcc make), bash, coreutils timeout, network to Debian's
# archive. Idempotent: a target whose launcher already works is kept. Takes ~4-5 minutes on 2 cores from scratch,
# nearly all of it compiling the two musl CPythons; the apt part is ~30 s.
set -euo pipefail

DIR="${1:?usage: .ci/install_foreign.sh DIR}"
mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd)"
TARGETS="${FOREIGN_TARGETS:-aarch64-gnu-3.11 aarch64-gnu-3.14 x86_64-gnu-3.14 x86_64-musl-3.11 x86_64-musl-3.9}"
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
MIRROR=http://deb.debian.org/debian

BOOKWORM_PKGS="python3.11-minimal=3.11.2-6+deb12u9 libpython3.11-minimal=3.11.2-6+deb12u9
libpython3.11-stdlib=3.11.2-6+deb12u9 libc6=2.36-9+deb12u14 libexpat1=2.5.0-1+deb12u5 zlib1g=1:1.2.13.dfsg-1
libssl3=3.0.22-1~deb12u2 libbz2-1.0=1.0.8-5+b1 libcrypt1=1:4.4.33-2 libffi8=3.4.4-1 liblzma5=5.4.1-1+deb12u2
libuuid1=2.38.1-5+deb12u3 libgcc-s1=12.2.0-14+deb12u1"
SID_PKGS="python3.14-minimal=3.14.10-1 libpython3.14-minimal=3.14.10-1 libpython3.14-stdlib=3.14.10-1
libc6=2.43-7 libexpat1=2.9.0-1 zlib1g=1:1.3.dfsg+really1.3.2-4 libssl3t64=3.6.5-1 libbz2-1.0=1.0.8-6+b2
libffi8=3.8.0-2 liblzma5=5.8.4-1 libuuid1=2.42.4-1 libzstd1=1.5.7+dfsg-4 libgcc-s1=16.2.0-4"
# source package, suite, orig tarball, its sha256
SRC_PY311="python3.11 bookworm python3.11_3.11.2.orig.tar.gz 2411c74bda5bbcfcddaf4531f66d1adc73f247f529aee981b029513aefdbf849"
SRC_PY39="python3.9 bullseye python3.9_3.9.2.orig.tar.xz 3c2034c54f811448f516668dce09d24008a0716c3a794dd8639b5388cbde247d"
SRC_ZLIB="zlib bookworm zlib_1.2.13.dfsg.orig.tar.bz2 71feb7947e3c00ef125f83b79a4e529bde31171e5babe48b391f06758d1ab0a1"

start=$(date +%s)
log() { printf 'install_foreign: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
wants() { case " $TARGETS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

# ------------------------------------------------------------------------------------------- host tools
need_host=()
if wants aarch64-gnu-3.11 || wants aarch64-gnu-3.14; then
  [ -x /usr/bin/qemu-aarch64-static ] || need_host+=(qemu-user-static)
fi
if wants x86_64-musl-3.11 || wants x86_64-musl-3.9; then
  command -v musl-gcc >/dev/null 2>&1 || need_host+=(musl-tools)
  command -v gcc >/dev/null 2>&1 || need_host+=(gcc)
  command -v make >/dev/null 2>&1 || need_host+=(make)
  command -v xz >/dev/null 2>&1 || need_host+=(xz-utils)
fi
command -v dpkg-deb >/dev/null 2>&1 || die "dpkg-deb not found (a Debian/Ubuntu host is needed)"
[ -f "$KEYRING" ] || need_host+=(debian-archive-keyring)
if [ "${#need_host[@]}" -gt 0 ]; then
  log "apt-get install ${need_host[*]}"
  timeout 300 apt-get update -qq || die "apt-get update failed"
  DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq "${need_host[@]}" >/dev/null \
    || die "apt-get install ${need_host[*]} failed"
fi

# ------------------------------------------------------------------- private apt roots (host apt untouched)
# One root per suite, arm64 + amd64, binaries and sources; the host's dpkg architectures and lists stay as they are.
apt_root() {  # $1 = name, rest = "suite component" source lines
  local root="$DIR/apt/$1"; shift
  mkdir -p "$root/state/lists/partial" "$root/cache/archives/partial" "$root/prefs.d"
  : > "$root/status"
  : > "$root/sources.list"
  # sources from the first (main) line only: the mirror here does not serve bookworm-security's source files
  printf 'deb-src [signed-by=%s] %s\n' "$KEYRING" "$1" >> "$root/sources.list"
  local line
  for line in "$@"; do printf 'deb [signed-by=%s] %s\n' "$KEYRING" "$line" >> "$root/sources.list"; done
  echo "$root"
}
apt_opts() {  # $1 = root
  printf '%s\n' -o "Dir::Etc::SourceList=$1/sources.list" -o "Dir::Etc::SourceParts=/nonexistent" \
    -o "Dir::Etc::Preferences=$1/prefs" -o "Dir::Etc::PreferencesParts=$1/prefs.d" -o "Dir::State=$1/state" \
    -o "Dir::State::status=$1/status" -o "Dir::Cache=$1/cache" -o "APT::Architecture=amd64" \
    -o "APT::Architectures::=amd64" -o "APT::Architectures::=arm64" -o "APT::Sandbox::User=root" \
    -o "Acquire::Retries=2"
}
declare -A APT_READY=()
APT_ROOT=""
apt_for() {  # $1 = bookworm|sid|bullseye -> APT_ROOT, its indexes updated once per run
  local root
  case "$1" in
    bookworm) root=$(apt_root bookworm "$MIRROR bookworm main" "http://deb.debian.org/debian-security bookworm-security main") ;;
    sid) root=$(apt_root sid "$MIRROR sid main") ;;
    bullseye) root=$(apt_root bullseye "$MIRROR bullseye main") ;;
  esac
  if [ -z "${APT_READY[$1]:-}" ]; then
    local opts; mapfile -t opts < <(apt_opts "$root")
    timeout 300 apt-get "${opts[@]}" -qq update >&2 || die "apt-get update of the $1 indexes failed"
    APT_READY[$1]=1
  fi
  APT_ROOT="$root"
}

fetch_debs() {  # $1 = suite, $2 = arch, $3 = dest dir, $4 = "pkg=version ..." -> .debs in dest
  apt_for "$1"
  local opts; mapfile -t opts < <(apt_opts "$APT_ROOT")
  local specs=() p name
  for p in $4; do
    name="${p%%=*}"
    if [ "${FOREIGN_LATEST:-0}" = "1" ]; then specs+=("$name:$2"); else specs+=("$name:$2=${p#*=}"); fi
  done
  mkdir -p "$3"
  if ! (cd "$3" && timeout 600 apt-get "${opts[@]}" -qq download "${specs[@]}" >/dev/null 2>"$3/.apt.err"); then
    cat "$3/.apt.err" >&2
    die "apt-get download from $1/$2 failed: a pinned version is probably gone from the archive.
  See what is there: apt-cache madison <pkg> (with a $1 source), update the pins in $0, or rerun with FOREIGN_LATEST=1"
  fi
  if [ "${FOREIGN_LATEST:-0}" = "1" ]; then log "FOREIGN_LATEST=1: $1/$2 got $(cd "$3" && ls *.deb | tr '\n' ' ')"; fi
}

unpack_sysroot() {  # $1 = debs dir, $2 = sysroot
  rm -rf "$2.tmp" && mkdir -p "$2.tmp"
  local deb
  for deb in "$1"/*.deb; do dpkg-deb -x "$deb" "$2.tmp"; done
  local d  # merged-/usr layouts (sid) ship only usr/lib…: give PT_INTERP (/lib/ld-…) a path inside the sysroot
  for d in bin sbin lib lib64; do
    if [ -d "$2.tmp/usr/$d" ] && [ ! -e "$2.tmp/$d" ]; then ln -s "usr/$d" "$2.tmp/$d"; fi
  done
  rm -rf "$2" && mv "$2.tmp" "$2"
}

write_launcher() {  # $1 = name, $2 = body (one exec line)
  mkdir -p "$DIR/bin"
  printf '#!/bin/sh\n# written by .ci/install_foreign.sh\n%s\n' "$2" > "$DIR/bin/$1.tmp"
  chmod 755 "$DIR/bin/$1.tmp"
  mv "$DIR/bin/$1.tmp" "$DIR/bin/$1"
}

launcher_ok() {  # $1 = launcher, $2 = expected "3.X machine"
  [ -x "$1" ] && [ "$(timeout 120 "$1" -S -c 'import sys, platform; print("%d.%d %s" % (sys.version_info[:2] + (platform.machine(),)))' 2>/dev/null)" = "$2" ]
}

LAUNCHERS=()
debian_target() {  # $1 target, $2 suite, $3 arch, $4 pkgs, $5 python binary name, $6 launcher name, $7 "3.X machine"
  local sysroot="$DIR/$(echo "$1" | cut -d- -f1)-$2" launcher="$DIR/bin/$6"
  if ! launcher_ok "$launcher" "$7"; then
    log "$1: Debian $2 $3 packages -> $sysroot"
    fetch_debs "$2" "$3" "$DIR/debs/$2-$3" "$4"
    unpack_sysroot "$DIR/debs/$2-$3" "$sysroot"
    if [ "$3" = arm64 ]; then
      write_launcher "$6" "exec /usr/bin/qemu-aarch64-static -L '$sysroot' '$sysroot/usr/bin/$5' \"\$@\""
    else
      write_launcher "$6" "exec '$sysroot/lib64/ld-linux-x86-64.so.2' --library-path '$sysroot/lib/x86_64-linux-gnu:$sysroot/usr/lib/x86_64-linux-gnu' '$sysroot/usr/bin/$5' \"\$@\""
    fi
    launcher_ok "$launcher" "$7" || die "$1: $launcher does not run ($("$launcher" -c pass 2>&1 | tail -1))"
  fi
  log "$1: $launcher ($("$launcher" -S -c 'import sys; print(sys.version.split()[0])'))"
  LAUNCHERS+=("$launcher")
}

SOURCE=""
fetch_source() {  # $1 = "srcpkg suite file sha256", $2 = dest dir -> SOURCE, the verified tarball
  local pkg suite file sum; read -r pkg suite file sum <<< "$1"
  mkdir -p "$2"
  if [ ! -f "$2/$file" ] || ! echo "$sum  $2/$file" | sha256sum -c --quiet - 2>/dev/null; then
    apt_for "$suite"
    local opts; mapfile -t opts < <(apt_opts "$APT_ROOT")
    (cd "$2" && timeout 600 apt-get "${opts[@]}" -qq source --download-only "$pkg" >/dev/null 2>"$2/.apt.err") \
      || { cat "$2/.apt.err" >&2; die "apt-get source $pkg ($suite) failed"; }
    [ -f "$2/$file" ] || die "apt-get source $pkg ($suite) did not give $file (new upstream version? update the pin)"
    echo "$sum  $2/$file" | sha256sum -c --quiet - || die "$file: sha256 differs from the pin"
  fi
  SOURCE="$2/$file"
}

musl_target() {  # $1 target, $2 "srcpkg suite file sha256", $3 "3.X", $4 configure multiarch answer
  local prefix="$DIR/musl-$3" launcher="$DIR/bin/python$3-x86_64-linux-musl"
  if ! launcher_ok "$launcher" "$3 x86_64"; then
    log "$1: CPython from Debian's $(echo "$2" | cut -d' ' -f3) built with musl-gcc -> $prefix (a few minutes)"
    local src="$DIR/src" build="$DIR/build-musl-$3"
    local py_tar zlib_tar
    fetch_source "$2" "$src"; py_tar="$SOURCE"
    fetch_source "$SRC_ZLIB" "$src"; zlib_tar="$SOURCE"
    rm -rf "$build" "$prefix" && mkdir -p "$build"
    cat > "$build/musl-cc" <<'EOF'
#!/bin/sh
# musl-gcc reporting the musl multiarch: gcc says x86_64-linux-gnu, and CPython's setup.py would then add glibc's
# header folder. configure (--print-multiarch) hears MUSL_CONFIGURE_MULTIARCH: 3.9's configure names the musl
# triplet x86_64-linux-gnu itself and must hear nothing; setup.py (-print-multiarch) always hears the musl one.
for a in "$@"; do
  case "$a" in
    --print-multiarch) echo "${MUSL_CONFIGURE_MULTIARCH-x86_64-linux-musl}"; exit 0 ;;
    -print-multiarch) echo x86_64-linux-musl; exit 0 ;;
  esac
done
exec musl-gcc "$@"
EOF
    chmod 755 "$build/musl-cc"
    tar -xf "$zlib_tar" -C "$build" && tar -xf "$py_tar" -C "$build"
    local zdir pdir; zdir=$(echo "$build"/zlib-*/); pdir=$(echo "$build"/Python-*/)
    local blog="$build/build.log"
    step() {  # $1 seconds, rest: command (in the current folder), output to the build log
      local limit="$1"; shift
      timeout "$limit" "$@" >> "$blog" 2>&1 || { tail -30 "$blog" >&2; die "$target: '$*' failed or took over $limit s (log: $blog)"; }
    }
    local target="$1" jobs; jobs="$(nproc)"
    (cd "$zdir" && CC=musl-gcc CFLAGS="-O2 -fPIC" step 120 ./configure --static --prefix="$build/deps" \
      && step 300 make -j"$jobs" && step 120 make install)
    (cd "$pdir" && MUSL_CONFIGURE_MULTIARCH="$4" CC="$build/musl-cc" CPPFLAGS="-I$build/deps/include" \
      LDFLAGS="-L$build/deps/lib" step 300 ./configure --prefix="$prefix" --without-ensurepip --disable-test-modules \
      && step 1500 make -j"$jobs" && step 600 make install)
    write_launcher "python$3-x86_64-linux-musl" "exec '$prefix/bin/python$3' \"\$@\""
    launcher_ok "$launcher" "$3 x86_64" || die "$1: $launcher does not run ($("$launcher" -c pass 2>&1 | tail -1))"
    rm -rf "$build"
  fi
  log "$1: $launcher ($("$launcher" -S -c 'import sys; print(sys.version.split()[0])'), musl)"
  LAUNCHERS+=("$launcher")
}

wants aarch64-gnu-3.11 && debian_target aarch64-gnu-3.11 bookworm arm64 "$BOOKWORM_PKGS" python3.11 \
  python3.11-aarch64-linux-gnu "3.11 aarch64"
wants aarch64-gnu-3.14 && debian_target aarch64-gnu-3.14 sid arm64 "$SID_PKGS" python3.14 \
  python3.14-aarch64-linux-gnu "3.14 aarch64"
wants x86_64-gnu-3.14 && debian_target x86_64-gnu-3.14 sid amd64 "$SID_PKGS" python3.14 \
  python3.14-x86_64-linux-gnu "3.14 x86_64"
wants x86_64-musl-3.11 && musl_target x86_64-musl-3.11 "$SRC_PY311" 3.11 x86_64-linux-musl
wants x86_64-musl-3.9 && musl_target x86_64-musl-3.9 "$SRC_PY39" 3.9 ""

[ "${#LAUNCHERS[@]}" -gt 0 ] || die "no target selected (FOREIGN_TARGETS=$TARGETS)"
(IFS=:; echo "${LAUNCHERS[*]}") > "$DIR/foreign_pythons"
log "done in $(( $(date +%s) - start )) s"
log "export BKMCP_FOREIGN_PYTHONS=\"\$(cat $DIR/foreign_pythons)\""
