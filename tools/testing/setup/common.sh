# SPDX-License-Identifier: GPL-2.0
# Shared settings for ferry's setup and test scripts. Sourced, never run.

FERRY_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
# Everything large lives outside the repository, in a cache that survives clones.
FERRY_CACHE=${FERRY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ferry}
FERRY_LLVM=${FERRY_LLVM:--19}
FERRY_RUSTC=${FERRY_RUSTC:-/usr/bin/rustc}
FERRY_CLIPPY_DRIVER=${FERRY_CLIPPY_DRIVER:-/usr/bin/clippy-driver}
FERRY_BINDGEN=${FERRY_BINDGEN:-$FERRY_CACHE/cargo/bin/bindgen}
FERRY_VENV=${FERRY_VENV:-$FERRY_CACHE/venv}
export LIBCLANG_PATH=${LIBCLANG_PATH:-/usr/lib/llvm${FERRY_LLVM}/lib}

step() { printf '==> %s\n' "$*" >&2; }
die() {
	printf 'ERROR: %s\n' "$1" >&2
	[ -n "${2:-}" ] && printf '  fix: %s\n' "$2" >&2
	exit 1
}

# Takes the machine-wide kernel build lock on fd 7 (kept until the script
# exits): two kernel builds at once would each take twice as long.
build_lock() {
	mkdir -p "$FERRY_CACHE"
	exec 7>"$FERRY_CACHE/kernel-build.lock"
	flock -n 7 || {
		step "another kernel build is running on this machine; waiting for it"
		flock 7
	}
}

# apt options for the private apt setup under $FERRY_CACHE/apt (the
# trixie-backports lists kernel.sh reads), one per line: the system's apt
# configuration is never touched.
apt_opts() {
	local apt=$FERRY_CACHE/apt
	printf '%s\n' -o "Dir::Etc::sourcelist=$apt/sources.list" -o Dir::Etc::sourceparts=/nonexistent \
		-o "Dir::State::Lists=$apt/lists" -o "Dir::Cache::archives=$apt/archives" \
		-o APT::Get::List-Cleanup=0 -o APT::Sandbox::User=root
}

# Make variables every kernel and module build needs.
kmake_vars() {
	printf '%s\n' "LLVM=$FERRY_LLVM" "RUSTC=$FERRY_RUSTC" "BINDGEN=$FERRY_BINDGEN"
}

# Builds ferry.ko and the samples (production build) against the test kernel,
# and ferryctl; prints the kernel build directory. For `make demo` and
# `make bench`, as `KBUILD=$(build_production)` (each step checked: errexit
# does not reach into a command substitution).
build_production() {
	local kbuild kv
	bash "$FERRY_ROOT/tools/testing/setup/deps.sh" >&2 || return 1
	kbuild=$(bash "$FERRY_ROOT/tools/testing/setup/kernel.sh") || return 1
	mapfile -t kv < <(kmake_vars)
	step "building ferry.ko and the samples"
	make -s -C "$kbuild" M="$FERRY_ROOT" "${kv[@]}" CONFIG_FERRY=m CONFIG_FERRY_BLK=m CONFIG_FERRY_SAMPLES=m \
		modules >&2 || return 1
	step "building ferryctl"
	(cd "$FERRY_ROOT/tools/ferryctl" && cargo build --release --quiet) >&2 || return 1
	echo "$kbuild"
}

# Runs a command in the build root ROOT (a Debian root made by distro.sh), in
# a mount namespace of its own with /proc mounted (nothing outlives the
# command), with a clean environment: none of this host's toolchain settings.
in_root() { # ROOT command...
	local root=$1
	shift
	env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
		unshare --mount --propagation private -- \
		bash -c 'mount -t proc proc "$0/proc" && exec chroot "$0" "$@"' "$root" "$@"
}
