#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# `make bench`: sets up what is missing, builds ferry.ko, ferry_blk.ko and
# the samples (production build) and ferryctl, then runs the two parts, each
# in a VM of its own: tools/bench/bench.py (ferry's messages and transfers
# beside perftest; results in tools/bench/out/results.md and .json) and
# tools/bench/blkbench.py (ferry_blk beside nvme-rdma and RNBD; results in
# tools/bench/out/block.md and .json). BENCH_PART=messages or block runs one
# part; BENCH_ROUNDS sets the number of interleaved rounds (default 5);
# BENCH_BASELINE=REV measures the ferry of commit REV beside it (before and
# after a change); BENCH_ROWS="4k randread QD1|..." runs only those block rows,
# BENCH_SCALING_ROUNDS the rounds of its scaling curves (default 3, 0: none),
# BENCH_FERRY_ONLY=1 measures ferry_blk and the baseline alone (no peers).
# BENCH_PART=profile (`make profile`) runs neither: tools/bench/profile.py
# samples where a 4 KiB read at QD1 spends its CPU time, in ferry_blk and in
# nvme-rdma (tools/bench/out/profile.md).
set -euo pipefail
. "$(dirname "$0")/../testing/setup/common.sh"
cd "$FERRY_ROOT"

KBUILD=$(build_production)
mkdir -p tools/bench/out
# The block part's charts: matplotlib, in the tools' Python environment.
if ! "$FERRY_VENV/bin/python3" -c 'import matplotlib' 2>/dev/null; then
	step "installing matplotlib into $FERRY_VENV"
	"$FERRY_VENV/bin/pip" install -q matplotlib || die "pip install matplotlib failed" "see the pip output above"
fi

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
	make -s -C "$KBUILD" M="$tree" "${kv[@]}" CONFIG_FERRY=m CONFIG_FERRY_BLK=m CONFIG_FERRY_SAMPLES=m modules >&2
	baseline=(--baseline-ko "$tree/ferry.ko" --baseline-name "commit ${rev:0:12}")
fi

common=(--kernel "$KBUILD/arch/x86/boot/bzImage" --ferry-ko "$FERRY_ROOT/ferry.ko"
	--ferryctl "$FERRY_ROOT/tools/ferryctl/target/release/ferryctl"
	--rounds "${BENCH_ROUNDS:-5}" "${baseline[@]}")
part=${BENCH_PART:-all}
case $part in all | messages | block | profile) ;; *) die "BENCH_PART must be messages, block or profile: got '$part'" ;; esac
rc=0
if [ "$part" = profile ]; then
	python3 tools/bench/profile.py --kernel "$KBUILD/arch/x86/boot/bzImage" \
		--ferry-ko "$FERRY_ROOT/ferry.ko" \
		--ferryctl "$FERRY_ROOT/tools/ferryctl/target/release/ferryctl" \
		--out "$FERRY_ROOT/tools/bench/out" || rc=1
	exit $rc
fi
if [ "$part" != block ]; then
	python3 tools/bench/bench.py "${common[@]}" --results "$FERRY_ROOT/tools/bench/out/results.md" || rc=1
fi
if [ "$part" != messages ]; then
	rows=()
	if [ -n "${BENCH_ROWS:-}" ]; then
		IFS='|' read -r -a rows <<<"$BENCH_ROWS"
		rows=(--only "${rows[@]}")
	fi
	python3 tools/bench/blkbench.py "${common[@]}" --results "$FERRY_ROOT/tools/bench/out/block.md" \
		--scaling-rounds "${BENCH_SCALING_ROUNDS:-3}" ${BENCH_FERRY_ONLY:+--ferry-only} \
		"${rows[@]}" || rc=1
	if [ -f tools/bench/out/block.json ]; then
		"$FERRY_VENV/bin/python3" tools/bench/charts.py tools/bench/out/block.json || rc=1
	fi
fi
exit $rc
