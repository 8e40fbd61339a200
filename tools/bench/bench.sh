#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# `make bench`: sets up what is missing, builds ferry.ko and the samples
# (production build) and ferryctl, then runs tools/bench/bench.py in one VM.
# The results go to tools/bench/out/results.md (and .json); BENCH_ROUNDS sets
# the number of interleaved rounds (default 5); BENCH_BASELINE=REV measures
# the ferry of commit REV beside it (before and after a change).
set -euo pipefail
. "$(dirname "$0")/../testing/setup/common.sh"
cd "$FERRY_ROOT"

KBUILD=$(build_production)
mkdir -p tools/bench/out

# BENCH_BASELINE=REV: a commit to compare with (before a change), built in a
# copy of its tree under the cache and measured in the same rounds.
baseline=()
if [ -n "${BENCH_BASELINE:-}" ]; then
	rev=$(git rev-parse --verify "$BENCH_BASELINE^{commit}")
	tree=$FERRY_CACHE/bench-baseline/$rev
	if [ ! -d "$tree" ]; then
		mkdir -p "$tree.tmp"
		git archive "$rev" | tar -x -C "$tree.tmp"
		mv "$tree.tmp" "$tree"
	fi
	# The same benchmark on both: this tree's ferry_bench, built against
	# REV's ferry (it must compile against REV's header).
	cp samples/c/ferry_bench.c "$tree/samples/c/ferry_bench.c"
	mapfile -t kv < <(kmake_vars)
	step "building the baseline, $rev"
	make -s -C "$KBUILD" M="$tree" "${kv[@]}" CONFIG_FERRY=m CONFIG_FERRY_SAMPLES=m modules >&2
	baseline=(--baseline-ko "$tree/ferry.ko")
fi

exec python3 tools/bench/bench.py --kernel "$KBUILD/arch/x86/boot/bzImage" \
	--ferry-ko "$FERRY_ROOT/ferry.ko" \
	--ferryctl "$FERRY_ROOT/tools/ferryctl/target/release/ferryctl" \
	--rounds "${BENCH_ROUNDS:-5}" --results "$FERRY_ROOT/tools/bench/out/results.md" \
	"${baseline[@]}" "$@"
