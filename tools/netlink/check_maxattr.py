#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Checks that each generic netlink `doit` handler's `maxattr` in the Rust
glue (rust/*_nl.rs, `op_doit!`) is the one of its op in the generated
kernel code (src/*/nl_gen.c). The glue reads `info->attrs` up to that
number: one above the op's would read past the array the kernel parsed, one
below would ignore attributes the policy accepts.

usage: check_maxattr.py ROOT
"""
import pathlib
import re
import sys


def main():
    root = pathlib.Path(sys.argv[1])
    generated = {}
    for c in root.glob('src/*/nl_gen.c'):
        for op in re.findall(r'\{([^{}]*\.doit\s*=[^{}]*)\}', c.read_text()):
            doit = re.search(r'\.doit\s*=\s*(\w+)', op).group(1)
            m = re.search(r'\.maxattr\s*=\s*(\w+)', op)
            generated[doit] = m.group(1) if m else None
    glue = {}
    for rs in root.glob('rust/*_nl.rs'):
        for name, maxattr in re.findall(r'op_doit!\(\s*(?:///[^\n]*\n\s*)*(\w+)\s*=>[^,]*,\s*'
                                        r'maxattr\s+(\w+)\s*\)', rs.read_text()):
            glue[name] = maxattr
    bad = []
    for name, maxattr in sorted(glue.items()):
        if name not in generated:
            bad.append(f'{name}: no such doit in the generated ops')
        elif generated[name] != maxattr:
            bad.append(f'{name}: maxattr {maxattr} in the glue, {generated[name]} generated')
    for name in sorted(set(generated) - set(glue)):
        bad.append(f'{name}: generated, but no op_doit! in rust/')
    for b in bad:
        print(f'check_maxattr: {b}', file=sys.stderr)
    if not glue or not generated:
        print('check_maxattr: found no ops', file=sys.stderr)
        return 1
    if bad:
        return 1
    print(f'check_maxattr: {len(glue)} doit handlers agree with the generated ops')
    return 0


if __name__ == '__main__':
    sys.exit(main())
