#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# `make demo`: sets up what is missing, builds ferry.ko (production build), the
# samples and ferryctl, boots two VMs on one link and shows ferry at work on both.
set -euo pipefail
. "$(dirname "$0")/setup/common.sh"
cd "$FERRY_ROOT"

bash tools/testing/setup/deps.sh
KBUILD=$(bash tools/testing/setup/kernel.sh)
mapfile -t KV < <(kmake_vars)
step "building ferry.ko and the sample consumers"
make -s -C "$KBUILD" M="$FERRY_ROOT" "${KV[@]}" CONFIG_FERRY=m CONFIG_FERRY_SAMPLES=m modules >/dev/null
step "building ferryctl"
(cd tools/ferryctl && cargo build --release --quiet)
exec python3 tools/testing/vm/demo.py --kernel "$KBUILD/arch/x86/boot/bzImage" \
	--ferry-ko "$FERRY_ROOT/ferry.ko" \
	--ferryctl "$FERRY_ROOT/tools/ferryctl/target/release/ferryctl"
