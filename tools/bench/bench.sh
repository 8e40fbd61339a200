#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# `make bench`: sets up what is missing, builds ferry.ko and the samples
# (production build) and ferryctl, then runs tools/bench/bench.py in one VM.
# The results go to tools/bench/out/results.md (and .json); BENCH_ROUNDS sets
# the number of interleaved rounds (default 5).
set -euo pipefail
. "$(dirname "$0")/../testing/setup/common.sh"
cd "$FERRY_ROOT"

KBUILD=$(build_production)
mkdir -p tools/bench/out
exec python3 tools/bench/bench.py --kernel "$KBUILD/arch/x86/boot/bzImage" \
	--ferry-ko "$FERRY_ROOT/ferry.ko" \
	--ferryctl "$FERRY_ROOT/tools/ferryctl/target/release/ferryctl" \
	--rounds "${BENCH_ROUNDS:-5}" --results "$FERRY_ROOT/tools/bench/out/results.md" "$@"
