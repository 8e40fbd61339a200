#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Installs what building and testing ferry needs: Debian packages, bindgen-cli
# (through cargo) and virtme-ng (in a private Python venv). Idempotent and quick
# when everything is present.
set -euo pipefail
. "$(dirname "$0")/common.sh"

PKGS=(
	# kernel build: LLVM toolchain and Rust with its library sources
	clang-19 lld-19 llvm-19 libclang-19-dev
	rustc-web rust-web-src rust-web-clippy rustfmt-web
	flex bison bc libelf-dev libssl-dev cpio xz-utils kmod make patch
	# the Debian 13 build root (distro.sh)
	debootstrap
	# guest: emulator and the userspace the tests run inside it
	qemu-system-x86 iproute2 iputils-ping rdma-core ibverbs-providers ibverbs-utils
	perftest fio python3-venv
	# make profile: perf, inside the benchmark's VM
	linux-perf
	# ferry_blk cases: filesystems on the mapped disk, discards
	e2fsprogs xfsprogs util-linux
	# blk_identity: the udev rule, tried with `udevadm test`
	udev
	# make blktests: its ./check
	gawk
)

missing=()
for p in "${PKGS[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
		missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	step "installing Debian packages: ${missing[*]}"
	[ "$(id -u)" = 0 ] || die "installing packages needs root" \
		"run 'sudo make setup', or install: ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q >/dev/null ||
		die "apt-get update failed" "check the system's apt sources and network"
	apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null ||
		die "apt-get install failed for: ${missing[*]}" "run it by hand to see why"
else
	step "Debian packages present"
fi

if ! "$FERRY_BINDGEN" --version >/dev/null 2>&1; then
	step "installing bindgen-cli with cargo into $FERRY_CACHE/cargo"
	command -v cargo >/dev/null || die "cargo not found" "install Rust (rustup or Debian cargo)"
	cargo install --locked --quiet --root "$FERRY_CACHE/cargo" bindgen-cli ||
		die "cargo install bindgen-cli failed" "see the cargo output above"
fi
step "bindgen: $("$FERRY_BINDGEN" --version)"

if ! "$FERRY_VENV/bin/vng" --version >/dev/null 2>&1; then
	step "installing virtme-ng into $FERRY_VENV"
	python3 -m venv "$FERRY_VENV" || die "python3 -m venv failed" "install python3-venv"
	"$FERRY_VENV/bin/pip" install -q 'virtme-ng==1.42' pyyaml jsonschema ||
		die "pip install virtme-ng failed" "see the pip output above"
fi
step "virtme-ng: $("$FERRY_VENV/bin/vng" --version 2>&1 | head -1)"
