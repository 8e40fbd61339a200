#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Fetches the newest linux-source-7.3 from Debian's trixie-backports suite and
# builds the test kernel from tools/testing/config/ferry.config into
# $FERRY_CACHE/kbuild/<version>-<key>, where <key> hashes the config fragment and
# the rustc, bindgen and clang versions. Prints the build directory on stdout.
#
# The patches in tools/testing/kernel-patches (fixes to the kernel's own code
# that the tests run into) are applied to a hard-linked copy of the source, so
# the unpacked source stays pristine; they are part of the cache key.
#
# FERRY_DEBUG=1 adds tools/testing/config/debug.config (KASAN, lockdep, kmemleak).
# `kernel.sh --source` only fetches the source and prints its directory.
# Set KDIR to use another Rust-enabled 7.3 tree instead (nothing is built then).
set -euo pipefail
. "$(dirname "$0")/common.sh"

FRAGMENTS=("${FERRY_CONFIG:-$FERRY_ROOT/tools/testing/config/ferry.config}")
[ "${FERRY_DEBUG:-0}" = 0 ] || FRAGMENTS+=("$FERRY_ROOT/tools/testing/config/debug.config")

if [ -n "${KDIR:-}" ]; then
	[ -f "$KDIR/Module.symvers" ] || die "KDIR=$KDIR has no Module.symvers" \
		"point KDIR at a built Rust-enabled 7.3 tree"
	echo "$KDIR"
	exit 0
fi

# --- 1. kernel source ------------------------------------------------------
# A private apt setup that reads the mirror from the system's own sources and only
# swaps the suite: the system's apt configuration is never touched.
fetch_source() {
	local apt=$FERRY_CACHE/apt uri
	uri=$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' |
		grep -v -e security -e '^$' | grep -m1 debian || true)
	[ -n "$uri" ] || uri=$(grep -hs '^deb ' /etc/apt/sources.list | awk '{print $2}' |
		grep -v security | grep -m1 debian || true)
	[ -n "$uri" ] || die "no Debian mirror found in the system's apt sources" \
		"add a Debian entry to /etc/apt/sources.list, or set KDIR"
	mkdir -p "$apt/lists/partial" "$apt/archives/partial"
	echo "deb $uri trixie-backports main" >"$apt/sources.list"
	local opts
	mapfile -t opts < <(apt_opts)
	# Look for a newer 7.3 at most once a day; the cached lists serve meanwhile.
	if [ -z "$(find "$apt/lists" -name '*_InRelease' -mmin -1440 2>/dev/null)" ]; then
		step "reading trixie-backports from $uri"
		apt-get -q "${opts[@]}" update >/dev/null ||
			die "apt-get update of trixie-backports failed" \
				"check network and apt keys (debian-archive-keyring)"
	fi
	local ver
	ver=$(apt-cache "${opts[@]}" show linux-source-7.3 2>/dev/null |
		awk '/^Version:/{print $2}' | sort -V | tail -1)
	[ -n "$ver" ] || die "trixie-backports offers no linux-source-7.3" "set KDIR to a 7.3 tree"
	SRCVER=$ver
	SRCDIR=$FERRY_CACHE/src/linux-source-$ver
	if [ -f "$SRCDIR/Makefile" ]; then
		step "kernel source $ver present"
		return
	fi
	step "downloading linux-source-7.3 $ver"
	(cd "$apt/archives" && apt-get -q "${opts[@]}" download "linux-source-7.3=$ver" >/dev/null) ||
		die "download of linux-source-7.3 failed"
	local deb tmp
	deb=$(ls "$apt"/archives/linux-source-7.3_*.deb | sort -V | tail -1)
	tmp=$(mktemp -d "$FERRY_CACHE/src/.unpack.XXXX")
	dpkg -x "$deb" "$tmp"
	step "unpacking the kernel tarball"
	tar -C "$tmp" -xaf "$tmp"/usr/src/linux-source-7.3.tar.*
	rm -rf "$SRCDIR"
	mv "$tmp/linux-source-7.3" "$SRCDIR"
	rm -rf "$tmp" "$deb"
}

# A copy of the source with the test patches applied, named by their hash.
patch_source() {
	local patches=("$FERRY_ROOT"/tools/testing/kernel-patches/*.patch) hash dir tmp p
	[ -e "${patches[0]}" ] || return 0
	hash=$(cat "${patches[@]}" | sha256sum | cut -c1-12)
	dir=$SRCDIR+p$hash
	# One caller patches; another one waits for it.
	exec 8>"$dir.lock"
	flock 8
	if [ ! -f "$dir/.ferry-patched" ]; then
		step "applying ${#patches[@]} test patch(es) to the kernel source"
		tmp=$(mktemp -d "$FERRY_CACHE/src/.patch.XXXX")
		cp -al "$SRCDIR/." "$tmp/"
		for p in "${patches[@]}"; do
			# patch(1) writes a new file, so the hard links to the
			# pristine source are broken, never written through.
			if ! patch -s -p1 -d "$tmp" --no-backup-if-mismatch <"$p"; then
				rm -rf "$tmp"
				die "test patch ${p##*/} does not apply to $SRCVER" \
					"refresh it against the new source"
			fi
		done
		touch "$tmp/.ferry-patched"
		rm -rf "$dir"
		mv -T "$tmp" "$dir"
	fi
	exec 8>&-
	SRCDIR=$dir
}

mkdir -p "$FERRY_CACHE/src"
# One fetch at a time (distro.sh may be fetching beside a test run's kernel.sh).
exec 6>"$FERRY_CACHE/src/.fetch.lock"
flock 6
fetch_source
exec 6>&-
# --source: only the pristine source (for distro.sh); prints its directory.
if [ "${1:-}" = --source ]; then
	echo "$SRCDIR"
	exit 0
fi
patch_source

# --- 2. cache key ----------------------------------------------------------
key=$({
	cat "${FRAGMENTS[@]}"
	cat "$FERRY_ROOT"/tools/testing/kernel-patches/*.patch 2>/dev/null || true
	"$FERRY_RUSTC" --version
	"$FERRY_BINDGEN" --version
	"clang$FERRY_LLVM" --version | head -1
} | sha256sum | cut -c1-12)
OUT=$FERRY_CACHE/kbuild/$SRCVER-$key
ln -sfn "$SRCDIR" "$FERRY_CACHE/src/current"

# One build per output directory: a second caller waits for the first.
mkdir -p "$FERRY_CACHE/kbuild"
exec 9>"$OUT.lock"
if ! flock -n 9; then
	step "another build of this kernel is running; waiting for it"
	flock 9
fi

if [ -f "$OUT/.ferry-built" ]; then
	step "test kernel cached in $OUT"
	echo "$OUT"
	exit 0
fi

# --- 3. configure ----------------------------------------------------------
# Called from ferry's Makefile, this script inherits its command-line
# variables (`make CLIPPY=1` puts CLIPPY=1 in MAKEFLAGS): the kernel is
# built with none of them (with CLIPPY it would build its `core` with
# clippy-driver and fail).
unset MAKEFLAGS MFLAGS MAKELEVEL MAKEOVERRIDES CLIPPY
mapfile -t KV < <(kmake_vars)
mkdir -p "$OUT"
step "configuring the test kernel (tinyconfig + ${FRAGMENTS[*]##*/})"
make -s -C "$SRCDIR" O="$OUT" "${KV[@]}" rustavailable >/dev/null ||
	die "the kernel does not accept this Rust toolchain" \
		"make -C $SRCDIR ${KV[*]} rustavailable shows why"
make -s -C "$SRCDIR" O="$OUT" "${KV[@]}" tinyconfig >/dev/null
KCONFIG_CONFIG=$OUT/.config "$SRCDIR/scripts/kconfig/merge_config.sh" -m -O "$OUT" \
	"$OUT/.config" "${FRAGMENTS[@]}" >/dev/null
make -s -C "$SRCDIR" O="$OUT" "${KV[@]}" olddefconfig >/dev/null
# Every option the fragments ask for must have survived Kconfig's dependencies
# (a later fragment's word on an option is the one that counts).
bad=0
while read -r line; do
	case "$line" in
	CONFIG_*=*) grep -qxF "$line" "$OUT/.config" || { echo "  not set: $line" >&2; bad=1; } ;;
	"# CONFIG_"*" is not set") opt=${line#\# } opt=${opt%% *}
		grep -q "^$opt=" "$OUT/.config" && { echo "  still set: $opt" >&2; bad=1; } ;;
	esac
done < <(awk '
	/^CONFIG_[A-Za-z0-9_]+=/ { o = $0; sub(/=.*/, "", o); last[o] = $0; order[o] = NR }
	/^# CONFIG_[A-Za-z0-9_]+ is not set/ { o = $2; last[o] = $0; order[o] = NR }
	END { for (o in last) print order[o] "\t" last[o] }' "${FRAGMENTS[@]}" | sort -n | cut -f2-)
[ $bad = 0 ] || die "the config fragments do not apply cleanly to $SRCVER" \
	"fix the dependencies of the options above in ${FRAGMENTS[*]}"

# --- 4. build --------------------------------------------------------------
build_lock # one kernel build at a time on this machine
jobs=${FERRY_JOBS:-$(($(nproc) + 1))}
step "building the test kernel with -j$jobs (10 to 50 min on 2 cores; log: $OUT/build.log)"
start=$SECONDS
if ! make -C "$SRCDIR" O="$OUT" "${KV[@]}" -j"$jobs" >"$OUT/build.log" 2>&1; then
	grep -E 'error|Error' "$OUT/build.log" | head -20 >&2
	die "kernel build failed" "see $OUT/build.log"
fi
touch "$OUT/.ferry-built"
step "test kernel built in $((SECONDS - start)) s"
echo "$OUT"
