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
#                      is too old for sid's python3.14) by a script whose sys.executable runs as well
#   x86_64-musl-3.11   CPython 3.11.2 built from Debian's source tarball with Debian's musl-gcc (musl 1.2.3),
#   x86_64-musl-3.9    and 3.9.2 (bullseye source), zlib 1.2.13 linked in statically; no ssl/ctypes/lzma, which
#                      the --version/--help/--dry-run paths do not need
#   aarch64-musl-3.11  CPython 3.11.2 cross-built with Debian's gcc-aarch64-linux-gnu against Debian's arm64
#                      musl/musl-dev (into DIR/aarch64-musl), run by qemu-aarch64-static -L; the build Python is a
#                      CPython 3.11 of this machine (python3.11 on PATH, FOREIGN_BUILD_PYTHON, or x86_64-musl-3.11)
# Each one gets a launcher script DIR/bin/python<ver>-<arch>-linux-<libc>; DIR/foreign_pythons holds them joined
# by ":" (the value for BKMCP_FOREIGN_PYTHONS).
#
# Pins: the binary .debs by exact version (apt checks them against the signed indexes); the source tarballs by
# sha256. Debian drops superseded versions (security updates, sid uploads): a pin that is gone fails with a
# clear message; FOREIGN_LATEST=1 then takes the newest version of the same packages (and prints it) until the
# pins are updated. FOREIGN_TARGETS="aarch64-gnu-3.11 x86_64-musl-3.11" limits what is installed.
#
# Needs: root (apt-get install qemu-user-static musl-tools gcc-aarch64-linux-gnu gcc make), bash, coreutils timeout,
# network to Debian's archive. Idempotent: a target whose launcher already works is kept. From scratch on 2 cores:
# about 315 s, nearly all of it compiling the three musl CPythons (the three .deb targets: ~35-55 s); a rerun with
# everything in place, ~15 s.
set -euo pipefail

DIR="${1:?usage: .ci/install_foreign.sh DIR}"
mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd)"
TARGETS="${FOREIGN_TARGETS:-aarch64-gnu-3.11 aarch64-gnu-3.14 x86_64-gnu-3.14 x86_64-musl-3.11 x86_64-musl-3.9 aarch64-musl-3.11}"
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
MIRROR=http://deb.debian.org/debian

BOOKWORM_PKGS="python3.11-minimal=3.11.2-6+deb12u9 libpython3.11-minimal=3.11.2-6+deb12u9
libpython3.11-stdlib=3.11.2-6+deb12u9 libc6=2.36-9+deb12u14 libexpat1=2.5.0-1+deb12u5 zlib1g=1:1.2.13.dfsg-1
libssl3=3.0.22-1~deb12u2 libbz2-1.0=1.0.8-5+b1 libcrypt1=1:4.4.33-2 libffi8=3.4.4-1 liblzma5=5.4.1-1+deb12u2
libuuid1=2.38.1-5+deb12u3 libgcc-s1=12.2.0-14+deb12u1"
SID_PKGS="python3.14-minimal=3.14.10-1 libpython3.14-minimal=3.14.10-1 libpython3.14-stdlib=3.14.10-1
libc6=2.43-7 libexpat1=2.9.0-1 zlib1g=1:1.3.dfsg+really1.3.2-4 libssl3t64=3.6.5-1 libbz2-1.0=1.0.8-6+b2
libffi8=3.8.0-2 liblzma5=5.8.4-1 libuuid1=2.42.4-1 libzstd1=1.5.7+dfsg-4 libgcc-s1=16.2.0-4"
MUSL_ARM64_PKGS="musl=1.2.3-1 musl-dev=1.2.3-1"
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
if wants aarch64-gnu-3.11 || wants aarch64-gnu-3.14 || wants aarch64-musl-3.11; then
  [ -x /usr/bin/qemu-aarch64-static ] || need_host+=(qemu-user-static)
fi
if wants aarch64-musl-3.11; then
  command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || need_host+=(gcc-aarch64-linux-gnu)
fi
if wants x86_64-musl-3.11 || wants x86_64-musl-3.9 || wants aarch64-musl-3.11; then
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

launcher_ok() {  # $1 = launcher, $2 = expected "3.X machine", $3 = "self": its sys.executable runs as well
  local probe='import sys, platform'
  if [ "${3:-}" = self ]; then probe="$probe"'; import subprocess; subprocess.run([sys.executable, "-S", "-c", ""], check=True)'; fi
  [ -x "$1" ] && [ "$(timeout 120 "$1" -S -c "$probe"'; print("%d.%d %s" % (sys.version_info[:2] + (platform.machine(),)))' 2>/dev/null)" = "$2" ]
}

# $1 = sysroot, $2 = python binary name, $3 = launcher name. The binary runs through the sysroot's own ld.so, with
# argv[0] a script beside it that does the same: CPython's sys.executable is argv[0] (getpath), so a child started
# with sys.executable runs too (build_zipapp.py records its regular expressions in one), and the stdlib is found
# from that script's folder.
ldso_launcher() {
  local run="$1/usr/bin/$2-ldso"
  printf '#!/bin/sh\n# written by .ci/install_foreign.sh\nexec %s --library-path %s --argv0 %s %s "$@"\n' \
    "'$1/lib64/ld-linux-x86-64.so.2'" "'$1/lib/x86_64-linux-gnu:$1/usr/lib/x86_64-linux-gnu'" "'$run'" \
    "'$1/usr/bin/$2'" > "$run.tmp"
  chmod 755 "$run.tmp" && mv "$run.tmp" "$run"
  write_launcher "$3" "exec '$run' \"\$@\""
}

LAUNCHERS=()
debian_target() {  # $1 target, $2 suite, $3 arch, $4 pkgs, $5 python binary name, $6 launcher name, $7 "3.X machine"
  local sysroot="$DIR/$(echo "$1" | cut -d- -f1)-$2" launcher="$DIR/bin/$6" runs_itself=""
  [ "$3" = amd64 ] && runs_itself=self  # ldso_launcher: a child started with its sys.executable runs too
  if ! launcher_ok "$launcher" "$7" "$runs_itself"; then
    log "$1: Debian $2 $3 packages -> $sysroot"
    fetch_debs "$2" "$3" "$DIR/debs/$2-$3" "$4"
    unpack_sysroot "$DIR/debs/$2-$3" "$sysroot"
    if [ "$3" = arm64 ]; then
      write_launcher "$6" "exec /usr/bin/qemu-aarch64-static -L '$sysroot' '$sysroot/usr/bin/$5' \"\$@\""
    else
      ldso_launcher "$sysroot" "$5" "$6"
    fi
    launcher_ok "$launcher" "$7" "$runs_itself" || die "$1: $launcher does not run ($("$launcher" -c pass 2>&1 | tail -1))"
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

musl_target() {  # $1 target, $2 "srcpkg suite file sha256", $3 "3.X", $4 x86_64|aarch64
  local target="$1" ver="$3" arch="$4"
  local prefix="$DIR/musl-$arch-$ver" launcher="$DIR/bin/python$ver-$arch-linux-musl" sysroot="$DIR/aarch64-musl"
  if ! launcher_ok "$launcher" "$ver $arch"; then
    log "$target: CPython from Debian's $(echo "$2" | cut -d' ' -f3) built with musl -> $prefix (a few minutes)"
    local src="$DIR/src" build="$DIR/build-musl-$arch-$ver"
    local py_tar zlib_tar
    fetch_source "$2" "$src"; py_tar="$SOURCE"
    fetch_source "$SRC_ZLIB" "$src"; zlib_tar="$SOURCE"
    rm -rf "$build" "$prefix" && mkdir -p "$build"
    # The compiler wrapper answers the multiarch questions: gcc says <arch>-linux-gnu, and CPython 3.9-3.11's
    # setup.py (-print-multiarch) would then add glibc's header folder. configure (--print-multiarch) must agree
    # with the triplet it computes itself: x86_64-linux-musl for 3.10+, nothing for 3.9 (its configure calls musl
    # x86_64-linux-gnu) and for the cross build (compared against the build machine's triplet).
    local cc configure_multiarch="$arch-linux-musl" cross=()
    if [ "$arch" = x86_64 ]; then
      cc="musl-gcc"
      [ "$ver" != 3.9 ] || configure_multiarch=""
    else
      # Debian's arm64 musl + musl-dev, and their musl-gcc.specs pointed into the sysroot, for the cross gcc
      [ -x "$sysroot/lib/ld-musl-aarch64.so.1" ] || {
        fetch_debs bookworm arm64 "$DIR/debs/bookworm-arm64-musl" "$MUSL_ARM64_PKGS"
        unpack_sysroot "$DIR/debs/bookworm-arm64-musl" "$sysroot"
      }
      sed -e "s#/usr/include/aarch64-linux-musl#$sysroot/usr/include/aarch64-linux-musl#g" \
          -e "s#-L/usr/lib/aarch64-linux-musl#-L$sysroot/lib/aarch64-linux-musl -L$sysroot/usr/lib/aarch64-linux-musl#" \
          -e "s#/usr/lib/aarch64-linux-musl/#$sysroot/usr/lib/aarch64-linux-musl/#g" \
          "$sysroot/usr/lib/aarch64-linux-musl/musl-gcc.specs" > "$build/musl-gcc.specs"
      cc="aarch64-linux-gnu-gcc -specs $build/musl-gcc.specs"
      configure_multiarch=""
      local build_py="${FOREIGN_BUILD_PYTHON:-$(command -v "python$ver" || true)}"
      [ -n "$build_py" ] || build_py="$DIR/musl-x86_64-$ver/bin/python$ver"
      build_py=$("$build_py" -c "import sys; assert sys.version_info[:2] == (${ver%%.*}, ${ver#*.}); print(sys.executable)" \
        2>/dev/null) || true  # the real interpreter, not a pyenv shim
      [ -x "$build_py" ] || die "$target: cross-building needs a CPython $ver on this machine (python$ver on PATH, FOREIGN_BUILD_PYTHON, or the x86_64-musl-$ver target first)"
      printf 'ac_cv_file__dev_ptmx=yes\nac_cv_file__dev_ptc=no\n' > "$build/config.site"
      # --build says musl: 3.11.2's configure takes the musl triplet (and so EXT_SUFFIX) from the *build* OS
      cross=(--build=x86_64-pc-linux-musl --host=aarch64-linux-musl "--with-build-python=$build_py" --disable-ipv6)
    fi
    printf '#!/bin/sh\n# written by .ci/install_foreign.sh: %s with the multiarch answers CPython needs\nfor a in "$@"; do\n  case "$a" in\n    --print-multiarch) [ -n "%s" ] && echo "%s"; exit 0 ;;\n    -print-multiarch) echo %s; exit 0 ;;\n  esac\ndone\nexec %s "$@"\n' \
      "$cc" "$configure_multiarch" "$configure_multiarch" "$arch-linux-musl" "$cc" > "$build/cc"
    chmod 755 "$build/cc"
    tar -xf "$zlib_tar" -C "$build" && tar -xf "$py_tar" -C "$build"
    local zdir pdir; zdir=$(echo "$build"/zlib-*/); pdir=$(echo "$build"/Python-*/)
    local blog="$build/build.log" jobs ar=ar readelf=readelf
    jobs="$(nproc)"
    [ "$arch" = x86_64 ] || { ar=aarch64-linux-gnu-ar; readelf=aarch64-linux-gnu-readelf; }
    step() {  # $1 seconds, rest: command (in the current folder), output to the build log
      local limit="$1"; shift
      timeout "$limit" "$@" >> "$blog" 2>&1 || { tail -30 "$blog" >&2; die "$target: '$*' failed or took over $limit s (log: $blog)"; }
    }
    (cd "$zdir" && CC="$build/cc" AR="$ar" CFLAGS="-O2 -fPIC" step 120 ./configure --static --prefix="$build/deps" \
      && step 300 make -j"$jobs" && step 120 make install)
    (cd "$pdir" && CONFIG_SITE="$build/config.site" CC="$build/cc" AR="$ar" READELF="$readelf" CPPFLAGS="-I$build/deps/include" \
      LDFLAGS="-L$build/deps/lib" step 300 ./configure --prefix="$prefix" --without-ensurepip --disable-test-modules \
      "${cross[@]}" && step 1500 make -j"$jobs" && step 600 make install)
    if [ "$arch" = x86_64 ]; then
      write_launcher "python$ver-$arch-linux-musl" "exec '$prefix/bin/python$ver' \"\$@\""
    else
      write_launcher "python$ver-$arch-linux-musl" "exec /usr/bin/qemu-aarch64-static -L '$sysroot' '$prefix/bin/python$ver' \"\$@\""
    fi
    launcher_ok "$launcher" "$ver $arch" || die "$target: $launcher does not run ($("$launcher" -c pass 2>&1 | tail -1))"
    rm -rf "$build"
  fi
  log "$target: $launcher ($("$launcher" -S -c 'import sys; print(sys.version.split()[0])'), musl)"
  LAUNCHERS+=("$launcher")
}

wants aarch64-gnu-3.11 && debian_target aarch64-gnu-3.11 bookworm arm64 "$BOOKWORM_PKGS" python3.11 \
  python3.11-aarch64-linux-gnu "3.11 aarch64"
wants aarch64-gnu-3.14 && debian_target aarch64-gnu-3.14 sid arm64 "$SID_PKGS" python3.14 \
  python3.14-aarch64-linux-gnu "3.14 aarch64"
wants x86_64-gnu-3.14 && debian_target x86_64-gnu-3.14 sid amd64 "$SID_PKGS" python3.14 \
  python3.14-x86_64-linux-gnu "3.14 x86_64"
wants x86_64-musl-3.11 && musl_target x86_64-musl-3.11 "$SRC_PY311" 3.11 x86_64
wants x86_64-musl-3.9 && musl_target x86_64-musl-3.9 "$SRC_PY39" 3.9 x86_64
wants aarch64-musl-3.11 && musl_target aarch64-musl-3.11 "$SRC_PY311" 3.11 aarch64

[ "${#LAUNCHERS[@]}" -gt 0 ] || die "no target selected (FOREIGN_TARGETS=$TARGETS)"
(IFS=:; echo "${LAUNCHERS[*]}") > "$DIR/foreign_pythons"
log "done in $(( $(date +%s) - start )) s"
log "export BKMCP_FOREIGN_PYTHONS=\"\$(cat $DIR/foreign_pythons)\""
