#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Regenerates ferry's netlink code from Documentation/netlink/specs/*.yaml with the
# YNL generator of a kernel tree: the uapi header, the kernel policy and ops
# tables (C). With --check, generates into a scratch directory and fails on any
# difference from the checked-in files, or on a Rust `op_doit!` whose maxattr
# is not its op's (tools/netlink/check_maxattr.py).
#
# usage: ynl-gen.sh KSRC [--check]
set -euo pipefail
KSRC=$1
CHECK=${2:-}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY=${PYTHON:-python3}
GEN=$KSRC/tools/net/ynl/pyynl/ynl_gen_c.py
[ -f "$GEN" ] || { echo "ERROR: no YNL generator in $KSRC" >&2; exit 1; }

# The generator finds the schema next to the spec's directory: stage both.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/Documentation/netlink/specs"
cp "$KSRC"/Documentation/netlink/genetlink*.yaml "$work/Documentation/netlink/"
cp "$ROOT"/Documentation/netlink/specs/*.yaml "$work/Documentation/netlink/specs/"
# It also names the spec relative to the nearest directory holding MAINTAINERS.
touch "$work/MAINTAINERS"

# spec -> (uapi header, kernel header, kernel source), relative to the repo
targets=(
	"ferry include/uapi/linux/ferry.h src/ferry/nl_gen.h src/ferry/nl_gen.c"
	"ferry-blk include/uapi/linux/ferry_blk.h src/ferry_blk/nl_gen.h src/ferry_blk/nl_gen.c"
)
out=$ROOT
[ "$CHECK" = --check ] && out=$work/out
status=0
for t in "${targets[@]}"; do
	read -r fam uapi kh kc <<<"$t"
	spec=$work/Documentation/netlink/specs/$fam.yaml
	mkdir -p "$out/$(dirname "$uapi")" "$out/$(dirname "$kh")"
	(cd "$work" &&
		$PY "$GEN" --mode uapi --header --spec "$spec" -o "$out/$uapi" &&
		$PY "$GEN" --mode kernel --header --spec "$spec" -o "$out/$kh" &&
		$PY "$GEN" --mode kernel --source --spec "$spec" -o "$out/$kc") >/dev/null
	if [ "$CHECK" = --check ]; then
		for f in "$uapi" "$kh" "$kc"; do
			if ! diff -u "$ROOT/$f" "$out/$f"; then
				echo "ERROR: $f is stale: run 'make nl-gen'" >&2
				status=1
			fi
		done
	fi
done
# The Rust glue's maxattr of each op, against the generated ops.
if [ "$CHECK" = --check ] && ! $PY "$ROOT/tools/netlink/check_maxattr.py" "$ROOT"; then
	status=1
fi
exit $status
