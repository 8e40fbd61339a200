#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# `make blktests BLKTESTS=DIR`: the upstream blktests block group's device
# tests (`./check -d block`, or the tests BLKTESTS_TESTS names) on a ferry_blk
# disk in a VM of the test kernel, with TEST_DEVS naming it. DIR is a blktests tree as a user clones it; its
# helpers (src/) are built here with the host's compiler. Not part of
# `make test`. Ends with "N passed, N failed" (a test blktests did not run is
# neither); exits non-zero on any failure.
set -uo pipefail
. "$(dirname "$0")/setup/common.sh"
cd "$FERRY_ROOT"

BLKTESTS=${BLKTESTS:-}
[ -n "$BLKTESTS" ] && [ -x "$BLKTESTS/check" ] ||
	die "BLKTESTS must name a blktests tree (with its ./check): got '${BLKTESTS}'" \
		"git clone a blktests tree and run 'make blktests BLKTESTS=/path/to/blktests'"
BLKTESTS=$(cd "$BLKTESTS" && pwd)

bash tools/testing/setup/deps.sh || die "installing dependencies failed (see above)"
KBUILD=$(bash tools/testing/setup/kernel.sh) || die "the test kernel is not available (see above)"
KSRC=$(readlink -f "$KBUILD/source" 2>/dev/null || echo "$KBUILD")
mapfile -t KV < <(kmake_vars)
log=$FERRY_CACHE/build-blktests.log
step "building ferry.ko and ferry_blk.ko (log: $log)"
make -C "$KBUILD" M="$FERRY_ROOT" "${KV[@]}" CONFIG_FERRY=m CONFIG_FERRY_BLK=m CONFIG_FERRY_SAMPLES=m \
	CONFIG_FERRY_KUNIT_TEST=y modules >"$log" 2>&1 || { tail -30 "$log"; die "module build failed"; }
(cd tools/ferryctl && cargo build --release --quiet) || die "cargo build failed"
step "building blktests' helpers in $BLKTESTS/src"
make -C "$BLKTESTS" all >>"$log" 2>&1 || { tail -30 "$log"; die "blktests' helpers did not build"; }

results=$FERRY_CACHE/blktests-results.json
rm -f "$results"
BLKTESTS=$BLKTESTS python3 tools/testing/vm/run.py --kernel "$KBUILD/arch/x86/boot/bzImage" \
	--ksrc "$KSRC" --ferry-ko "$FERRY_ROOT/ferry.ko" \
	--ferryctl "$FERRY_ROOT/tools/ferryctl/target/release/ferryctl" \
	--group blktests --results "$results"
[ -f "$results" ] || die "the VM runner did not finish"
read -r passed failed < <(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(r['passed'], r['failed'])" "$results")
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
