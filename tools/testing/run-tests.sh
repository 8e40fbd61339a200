#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# `make test`: sets up what is missing, builds, and runs every test of ferry:
# the generated-code check, lint and format checks, ferryctl's cargo tests,
# and in QEMU the KUnit suites, the integration cases and the runner's
# self-tests. Ends with "N passed, N failed"; exits non-zero on any failure.
#
# FERRY_TESTS="case ..." runs only those VM cases (shell patterns).
set -uo pipefail
. "$(dirname "$0")/setup/common.sh"
cd "$FERRY_ROOT"

PASSED=0
FAILED=0
FAILURES=()
declare -A PHASE

t0=$SECONDS
phase() { # name start
	PHASE[$1]=$((SECONDS - $2))
	step "phase $1 took ${PHASE[$1]} s"
}
result() { # ok name [detail]
	if [ "$1" = ok ]; then
		PASSED=$((PASSED + 1))
		echo "ok   $2"
	else
		FAILED=$((FAILED + 1))
		FAILURES+=("$2")
		echo "FAIL $2${3:+: $3}"
	fi
}
finish() {
	echo
	step "timings: setup ${PHASE[setup]:-0} s, kernel ${PHASE[kernel]:-0} s," \
		"modules ${PHASE[modules]:-0} s, distro ${PHASE[distro]:-0} s, tests ${PHASE[tests]:-0} s, total $((SECONDS - t0)) s"
	for f in "${FAILURES[@]}"; do echo "failed: $f"; done
	echo "$PASSED passed, $FAILED failed"
	[ "$FAILED" = 0 ]
	exit
}
fatal() { # a step without which nothing else can run
	result fail "$1" "$2"
	finish
}

# --- setup --------------------------------------------------------------
s=$SECONDS
step "setup: packages, bindgen, virtme-ng"
bash tools/testing/setup/deps.sh || fatal setup "installing dependencies failed (see above)"
phase setup $s

# The Debian 13 build root (phase distro, below) is mostly downloads and
# unpacking: it is made while the test kernel builds, and waits for that
# build before it prepares its own tree.
distro_out=$FERRY_CACHE/distro-setup.log
distro_root=$FERRY_CACHE/distro-root.path
rm -f "$distro_root"
setsid bash -c 'bash tools/testing/setup/distro.sh >"$1"' _ "$distro_root" 2>"$distro_out" &
distro_pid=$!
# It runs in its own process group: stop all of it if this script ends early.
trap '[ -n "${distro_pid:-}" ] && kill -- -"$distro_pid" 2>/dev/null' EXIT

# --- kernel -------------------------------------------------------------
s=$SECONDS
KBUILD=$(bash tools/testing/setup/kernel.sh) || fatal kernel "the test kernel is not available (see above)"
KSRC=$(readlink -f "$KBUILD/source" 2>/dev/null || echo "$KBUILD")
BZIMAGE=$KBUILD/arch/x86/boot/bzImage
[ -f "$BZIMAGE" ] || fatal kernel "no bzImage in $KBUILD: the tests boot it, so KDIR must be a full kernel build (or unset KDIR to use the cached test kernel)"
phase kernel $s

# --- modules and tools ----------------------------------------------------
s=$SECONDS
mapfile -t KV < <(kmake_vars)
build_log=$FERRY_CACHE/build-test.log
step "building ferry.ko with its KUnit suites (log: $build_log)"
if make -C "$KBUILD" M="$FERRY_ROOT" "${KV[@]}" CONFIG_FERRY=m CONFIG_FERRY_BLK=m CONFIG_FERRY_SAMPLES=m CONFIG_FERRY_KUNIT_TEST=y \
	modules >"$build_log" 2>&1; then
	result ok build/ferry.ko
else
	tail -30 "$build_log"
	fatal build/ferry.ko "module build failed"
fi
step "building the KUnit self-test module"
if make -C "$KBUILD" M="$FERRY_ROOT/tools/testing/selftests/kunit_fail" "${KV[@]}" \
	modules >>"$build_log" 2>&1; then
	result ok build/kunit-selftest
else
	tail -30 "$build_log"
	fatal build/kunit-selftest "self-test module build failed"
fi
step "building ferryctl"
(cd tools/ferryctl && cargo build --release --quiet) || fatal build/ferryctl "cargo build failed"
result ok build/ferryctl
phase modules $s

# --- the distribution's kernel and compiler ----------------------------------
# Every module, built as a Debian 13 host builds it: against a tree prepared
# with Debian's 7.3 kernel config, by trixie's rustc 1.85.1, bindgen 0.71.1 and
# GCC 14, through `make KDIR=` (tools/build/kdir.sh picks that toolchain), with
# clippy and no warning allowed. A copy of the sources is built, so the test
# build's objects stay as they are.
s=$SECONDS
distro_log=$FERRY_CACHE/build-distro.log
step "building against Debian 13's kernel with its rustc (log: $distro_log)"
wait $distro_pid
distro_rc=$?
distro_pid=
sed 's/^/  /' "$distro_out" >&2
if [ $distro_rc = 0 ] && droot=$(cat "$distro_root") && [ -d "$droot/build" ]; then
	rm -rf "$droot/ferry"
	mkdir "$droot/ferry"
	git ls-files -co --exclude-standard -z | tar -c --null -T - | tar -x -C "$droot/ferry"
	if in_root "$droot" make -C /ferry KDIR=/build CLIPPY=1 modules >"$distro_log" 2>&1 &&
		! grep -qE '^(warning|error)' "$distro_log"; then
		result ok "build/debian13-$(in_root "$droot" rustc --version | awk '{print $1 "-" $2}')"
	else
		grep -E '^(warning|error|ERROR)' -A5 "$distro_log" | head -40
		result fail build/debian13 "see $distro_log"
	fi
else
	result fail build/debian13 "the Debian 13 build root could not be prepared (see above)"
fi
phase distro $s

# --- tests --------------------------------------------------------------
s=$SECONDS
step "checking the netlink code generated from the YNL spec"
if PYTHON=$FERRY_VENV/bin/python3 bash tools/netlink/ynl-gen.sh "$KSRC" --check; then
	result ok nl-gen/up-to-date
else
	result fail nl-gen/up-to-date "regenerate with 'make nl-gen'"
fi

step "lint: clippy over the kernel Rust code"
clippy_log=$FERRY_CACHE/clippy.log
touch src/ferry/ferry.rs src/ferry_blk/ferry_blk.rs samples/rust/ferry_echo.rs
if make -C "$KBUILD" M="$FERRY_ROOT" "${KV[@]}" CONFIG_FERRY=m CONFIG_FERRY_BLK=m CONFIG_FERRY_SAMPLES=m CONFIG_FERRY_KUNIT_TEST=y \
	CLIPPY=1 CLIPPY_DRIVER="$FERRY_CLIPPY_DRIVER" modules >"$clippy_log" 2>&1 &&
	! grep -qE '^(warning|error)' "$clippy_log"; then
	result ok lint/clippy
else
	grep -E '^(warning|error)' -A5 "$clippy_log" | head -40
	result fail lint/clippy "see $clippy_log"
fi

step "format: rustfmt (the kernel's settings for kernel code, cargo fmt for ferryctl)"
mapfile -t rs < <(git ls-files '*.rs' | grep -v '^tools/ferryctl/')
if /usr/bin/rustfmt --config-path "$KSRC/.rustfmt.toml" --check "${rs[@]}" &&
	(cd tools/ferryctl && cargo fmt --check); then
	result ok lint/rustfmt
else
	result fail lint/rustfmt "run 'make fmt'"
fi

step "unsafe outside rust/ (only the exported C-ABI shim may hold any)"
# Every line of src/ counts; export.rs is the C-ABI shim.
unsafe_src=$(git grep -nw unsafe -- 'src/*.rs' ':!src/*/export.rs' || true)
if [ -z "$unsafe_src" ]; then
	result ok lint/no-unsafe-in-src
else
	echo "$unsafe_src"
	result fail lint/no-unsafe-in-src
fi

step "lint: no circle of crate:: imports in src/ferry"
if python3 tools/lint/import_cycles.py src/ferry; then
	result ok lint/import-cycles
else
	result fail lint/import-cycles "see the circle above"
fi

step "cargo test: ferryctl"
cargo_log=$FERRY_CACHE/cargo-test.log
(cd tools/ferryctl && cargo test --quiet) >"$cargo_log" 2>&1
cargo_rc=$?
read -r cp cf < <(awk '/^test result:/ {p+=$4; f+=$6} END {print p+0, f+0}' "$cargo_log")
PASSED=$((PASSED + cp))
FAILED=$((FAILED + cf))
echo "cargo: $cp passed, $cf failed"
if [ $cargo_rc != 0 ] && [ "$cf" = 0 ]; then
	cat "$cargo_log"
	result fail cargo-test "cargo test exited with $cargo_rc"
fi

step "VM tests: KUnit, integration cases, runner self-tests"
vm_results=$FERRY_CACHE/vm-results.json
rm -f "$vm_results"
# The patterns are split on blanks and never expanded by this shell (an
# unquoted "[!b]*" would match files here instead of cases).
only=()
read -ra patterns <<< "${FERRY_TESTS:-}"
[ ${#patterns[@]} -gt 0 ] && only=(--only "${patterns[@]}")
python3 tools/testing/vm/run.py --kernel "$BZIMAGE" --ksrc "$KSRC" \
	--ferry-ko "$FERRY_ROOT/ferry.ko" \
	--ferryctl "$FERRY_ROOT/tools/ferryctl/target/release/ferryctl" \
	--selftest-ko "$FERRY_ROOT/tools/testing/selftests/kunit_fail/ferry_kunit_selftest.ko" \
	--results "$vm_results" "${only[@]}"
if [ -f "$vm_results" ]; then
	read -r vp vf < <(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(r['passed'], r['failed'])" "$vm_results")
	PASSED=$((PASSED + vp))
	FAILED=$((FAILED + vf))
	mapfile -t vfails < <(python3 -c "
import json,sys
for c in json.load(open(sys.argv[1]))['cases']:
    if not c['ok']: print('vm/' + c['name'])" "$vm_results")
	FAILURES+=("${vfails[@]}")
else
	result fail vm "the VM runner did not finish"
fi
phase tests $s
finish
