#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# `make demo`: sets up what is missing, builds ferry.ko (production build), the
# samples and ferryctl, boots two VMs on one link and shows ferry at work on both.
set -euo pipefail
. "$(dirname "$0")/setup/common.sh"
cd "$FERRY_ROOT"

KBUILD=$(build_production)
exec python3 tools/testing/vm/demo.py --kernel "$KBUILD/arch/x86/boot/bzImage" \
	--ferry-ko "$FERRY_ROOT/ferry.ko" \
	--ferryctl "$FERRY_ROOT/tools/ferryctl/target/release/ferryctl"
