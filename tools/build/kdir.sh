#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Usage: kdir.sh KDIR
#
# Checks that KDIR is a kernel tree ferry's modules can be built against and
# prints, one per line, the make variables that build them with the
# toolchain that built that kernel:
#
#   - the C compiler from the tree's own config: clang (LLVM=...) only if the
#     kernel was built with clang, else the GCC of the same major version;
#   - the rustc whose version text equals the tree's CONFIG_RUSTC_VERSION_TEXT
#     (RUSTC if given, else the first such rustc on PATH or in the usual
#     places), and the clippy-driver beside it;
#   - a bindgen at least as new as the tree asks (BINDGEN if given, else
#     bindgen on PATH).
#
# Anything missing gets one message that says what and how to get it, and
# exit status 1; nothing is installed or changed.
set -euo pipefail

KDIR=${1:?usage: kdir.sh KDIR}
die() {
	printf 'ERROR: %s\n' "$1" >&2
	[ -n "${2:-}" ] && printf '  %s\n' "${@:2}" >&2
	exit 1
}
conf() { # the value of a CONFIG_ option in the tree's .config, unquoted
	sed -n "s/^$1=//p" "$KDIR/.config" | sed 's/^"\(.*\)"$/\1/'
}

[ -f "$KDIR/.config" ] || die "KDIR=$KDIR is not a configured kernel tree (no .config)" \
	"point KDIR at the build directory of a Linux 7.3 kernel with Rust enabled"
[ "$(conf CONFIG_RUST)" = y ] || die "the kernel in $KDIR was built without Rust (CONFIG_RUST is not set)" \
	"ferry is written in Rust: it needs a kernel configured with CONFIG_RUST=y"

# --- the Rust build files a module needs -----------------------------------
files=(Module.symvers rust/libkernel.rmeta rust/libmacros.so)
# x86's Rust target is generated into the tree.
[ "$(conf CONFIG_X86_64)" = y ] && files+=(scripts/target.json)
missing=()
for f in "${files[@]}"; do
	[ -e "$KDIR/$f" ] || missing+=("$f")
done
if [ ${#missing[@]} -gt 0 ]; then
	die "KDIR=$KDIR lacks what Rust modules are built against: ${missing[*]}" \
		"A distribution's kernel headers package ships none of them; prepare a tree instead:" \
		"unpack the same kernel's source (Debian: linux-source-7.3), copy in the" \
		"kernel's config and its Module.symvers (Debian: from linux-headers-\$(uname -r))," \
		"then run 'make olddefconfig modules_prepare' there with the kernel's own" \
		"compiler and rustc (KERNELRELEASE=\$(uname -r)); README.md shows each step."
fi

# "# Linux/x86 7.3.4 Kernel Configuration", as every .config begins
version=$(sed -n 's|^# Linux/[^ ]* \([0-9][0-9.]*\)[^ ]* Kernel Configuration$|\1|p' "$KDIR/.config" | head -1)
case "$version" in
7.3 | 7.3.*) ;;
*) die "KDIR=$KDIR holds Linux ${version:-of an unknown version}; ferry is written for 7.3" ;;
esac

# --- rustc: the very one the kernel was built with -------------------------
want=$(conf CONFIG_RUSTC_VERSION_TEXT)
found=()
rustc=
candidates=()
if [ -n "${RUSTC:-}" ]; then
	candidates=("$RUSTC")
else
	command -v rustc >/dev/null && candidates+=("$(command -v rustc)")
	candidates+=(/usr/bin/rustc /usr/bin/rustc-[0-9]* /usr/lib/rust-*/bin/rustc
		"$HOME"/.rustup/toolchains/*/bin/rustc "$HOME"/.cargo/bin/rustc)
fi
declare -A seen
for r in "${candidates[@]}"; do
	[ -x "$r" ] && [ -z "${seen[$r]:-}" ] || continue
	seen[$r]=1
	v=$("$r" --version 2>/dev/null || true)
	[ "$v" = "$want" ] && { rustc=$r; break; }
	[ -n "$v" ] && found+=("$r: $v")
done
if [ -z "$rustc" ]; then
	if [ -n "${RUSTC:-}" ]; then
		[ ${#found[@]} -gt 0 ] || die "RUSTC=$RUSTC is not a rustc that runs here" \
			"the kernel in $KDIR was built with '$want': pass the path of that rustc"
		die "RUSTC=$RUSTC is '${found[0]#*: }', but the kernel in $KDIR was built with '$want'" \
			"Rust modules must be built by the rustc that built the kernel (its metadata is not" \
			"compatible with any other): install that version, or pass its path as RUSTC=."
	fi
	die "the kernel in $KDIR was built with '$want', and no rustc here is that version" \
		"found: $(IFS=';'; echo "${found[*]:-no rustc at all}")" \
		"Rust modules must be built by the rustc that built the kernel: install that" \
		"version (on Debian, the release's own rustc package) or pass its path as RUSTC=."
fi
echo "RUSTC=$rustc"
clippy=$(dirname "$rustc")/clippy-driver
[ -x "$clippy" ] && echo "CLIPPY_DRIVER=$clippy"

# --- the C compiler ---------------------------------------------------------
if [ "$(conf CONFIG_CC_IS_CLANG)" = y ]; then
	major=$(($(conf CONFIG_CLANG_VERSION) / 10000))
	if command -v "clang-$major" >/dev/null; then
		echo "LLVM=-$major"
	elif clang --version 2>/dev/null | grep -q "version $major\."; then
		echo "LLVM=1"
	else
		die "this kernel was built with clang $major ($(conf CONFIG_CC_VERSION_TEXT)); no clang-$major or clang $major found" \
			"install clang, lld and llvm $major (Debian: clang-$major lld-$major llvm-$major)"
	fi
else
	major=$(($(conf CONFIG_GCC_VERSION) / 10000))
	cc=
	for c in "x86_64-linux-gnu-gcc-$major" "gcc-$major" gcc; do
		if command -v "$c" >/dev/null && [ "$("$c" -dumpversion | cut -d. -f1)" = "$major" ]; then
			cc=$c
			break
		fi
	done
	[ -n "$cc" ] || die "this kernel was built with GCC $major ($(conf CONFIG_CC_VERSION_TEXT)); no gcc-$major found" \
		"install GCC $major (Debian: gcc-$major)"
	echo "CC=$cc"
fi

# --- bindgen ----------------------------------------------------------------
bindgen=${BINDGEN:-$(command -v bindgen || true)}
[ -n "$bindgen" ] || die "no bindgen found" \
	"install bindgen (Debian: bindgen; 0.71.1 or later) or pass its path as BINDGEN="
min=$(bash "$KDIR/source/scripts/min-tool-version.sh" bindgen 2>/dev/null ||
	bash "$KDIR/scripts/min-tool-version.sh" bindgen 2>/dev/null || echo 0.71.1)
have=$("$bindgen" --version 2>/dev/null | awk '{print $2}')
[ "$(printf '%s\n%s\n' "$min" "$have" | sort -V | head -1)" = "$min" ] ||
	die "$bindgen is version ${have:-unknown}; this kernel needs bindgen $min or later" \
		"install a newer one (Debian trixie's bindgen is 0.71.1) or pass BINDGEN="
echo "BINDGEN=$bindgen"
