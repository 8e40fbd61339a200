#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Prepares what a Debian 13 (trixie) host builds ferry against, so that every
# `make test` proves ferry still builds there: a trixie root with trixie's own
# rustc (1.85.1), rust-src, bindgen (0.71.1), clippy and GCC 14, and in it a
# kernel tree prepared from the same linux-source-7.3 as the test kernel, with
# the configuration and Module.symvers of Debian's 7.3 kernel from
# trixie-backports (linux-headers-<abi>-amd64). Prints the root's path; the
# prepared tree is /build inside it.
#
# Cached under $FERRY_CACHE/distro/, keyed by the package list, the kernel
# source version and the headers package version: a rerun takes a second.
set -euo pipefail
. "$(dirname "$0")/common.sh"

SUITE=trixie
# The toolchain of Debian 13's kernel, and what `make` needs around it.
PACKAGES=rustc,rust-src,bindgen,rust-clippy,gcc-14,make,flex,bison,bc,libelf-dev,libssl-dev,cpio,kmod,dwarves,python3,xz-utils

# The test kernel's source without its test patches; kernel.sh fetches it
# and reads the trixie-backports package lists.
src=$(bash "$(dirname "$0")/kernel.sh" --source)
srcver=${src##*/linux-source-}
mapfile -t opts < <(apt_opts)
# Debian's 7.3 kernel of the same source version, e.g. linux-headers-7.3.4+deb13-amd64.
hdr=$(apt-cache "${opts[@]}" search --names-only '^linux-headers-7\.3\.[0-9]+\+deb[0-9]+-amd64$' 2>/dev/null |
	awk '{print $1}' | while read -r p; do
		v=$(apt-cache "${opts[@]}" show "$p" | awk '/^Version:/{print $2}' | sort -V | tail -1)
		[ "$v" = "$srcver" ] && echo "$p"
	done | head -1)
[ -n "$hdr" ] || die "trixie-backports has no linux-headers-*-amd64 of version $srcver" \
	"the distribution's kernel and linux-source-7.3 must be of one version; see kernel.sh"
release=${hdr#linux-headers-}

# FORMAT changes when what this script makes changes.
FORMAT=1
key=$(echo "$FORMAT $SUITE $PACKAGES $srcver $hdr" | sha256sum | cut -c1-12)
DIR=$FERRY_CACHE/distro/$SUITE-$release-$key
ROOT=$DIR/root
mkdir -p "$DIR"
exec 9>"$DIR.lock"
flock 9
if [ -f "$DIR/.ferry-ready" ]; then
	step "Debian $SUITE build root cached in $DIR"
	echo "$ROOT"
	exit 0
fi
start=$SECONDS

# --- 1. the trixie root (kept once made: the longest step) ------------------
if [ ! -f "$DIR/.root-ready" ]; then
	command -v debootstrap >/dev/null || die "debootstrap is not installed" "run tools/testing/setup/deps.sh"
	rm -rf "$ROOT" "$ROOT.tmp"
	uri=$(awk '{print $2; exit}' "$FERRY_CACHE/apt/sources.list")
	step "debootstrap $SUITE with its rustc, bindgen and GCC 14 (log: $DIR/debootstrap.log)"
	if ! debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$ROOT.tmp" "$uri" \
		>"$DIR/debootstrap.log" 2>&1; then
		tail -5 "$DIR/debootstrap.log" >&2
		die "debootstrap of $SUITE failed" "see $DIR/debootstrap.log"
	fi
	mv "$ROOT.tmp" "$ROOT"
	touch "$DIR/.root-ready"
fi
step "in the root: $(in_root "$ROOT" rustc --version), $(in_root "$ROOT" bindgen --version)"
rm -rf "$ROOT/build" "$ROOT/usr/src/linux"

# --- 2. Debian's kernel configuration and symbol versions -------------------
step "fetching $hdr for the kernel's config and Module.symvers"
tmp=$(mktemp -d "$DIR/.hdr.XXXX")
(cd "$tmp" && apt-get -q "${opts[@]}" download "$hdr=$srcver" >/dev/null) ||
	die "download of $hdr failed"
dpkg -x "$tmp"/*.deb "$tmp/x"
mkdir -p "$ROOT/build"
cp "$tmp/x/usr/src/$hdr/.config" "$tmp/x/usr/src/$hdr/Module.symvers" "$ROOT/build/"
rm -rf "$tmp"

# --- 3. the prepared tree ---------------------------------------------------
# The pristine source, hard-linked (an O= build never writes to it).
mkdir -p "$ROOT/usr/src/linux"
cp -al "$src/." "$ROOT/usr/src/linux/"
build_lock
step "make olddefconfig modules_prepare for $release with GCC 14 and rustc 1.85 (log: $DIR/prepare.log)"
if ! in_root "$ROOT" make -C /usr/src/linux O=/build CC=x86_64-linux-gnu-gcc-14 \
	KERNELRELEASE="$release" -j"$(($(nproc) + 1))" olddefconfig modules_prepare \
	>"$DIR/prepare.log" 2>&1; then
	tail -20 "$DIR/prepare.log" >&2
	die "preparing the $release tree failed" "see $DIR/prepare.log"
fi
grep -q '^CONFIG_RUST=y' "$ROOT/build/.config" ||
	die "the prepared $release tree has no Rust: its config lost CONFIG_RUST" "see $DIR/prepare.log"
touch "$DIR/.ferry-ready"
step "Debian $SUITE build root ready in $((SECONDS - start)) s"
echo "$ROOT"
