#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Runs ferry's VM test cases and prints one line per test and a summary.

usage: run.py --kernel BZIMAGE --ksrc KSRC --ferry-ko KO --ferryctl BIN
              [--group integration|selftest|all] [--only NAME...] [--list]
              [--out DIR] [--results FILE]
"""
import argparse
import fnmatch
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'cases'))

import harness  # noqa: E402
import foundation  # noqa: E402,F401  (registers cases)
import selftest  # noqa: E402,F401
import sessions  # noqa: E402,F401
import messages  # noqa: E402,F401
import hostile  # noqa: E402,F401


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--kernel')
    ap.add_argument('--ksrc')
    ap.add_argument('--ferry-ko')
    ap.add_argument('--ferryctl')
    ap.add_argument('--selftest-ko', default='')
    ap.add_argument('--group', default='all')
    ap.add_argument('--only', nargs='*', default=[])
    ap.add_argument('--list', action='store_true')
    ap.add_argument('--out', default=os.path.join(harness.ROOT, 'tools', 'testing', 'out'))
    ap.add_argument('--results')
    args = ap.parse_args()

    cases = [c for c in harness.CASES
             if (args.group == 'all' or c.group == args.group)
             and (not args.only or any(fnmatch.fnmatch(c.name, p) for p in args.only))]
    if args.list:
        for c in cases:
            print(f'{c.group:12} {c.topology:7} {c.name}')
        return 0
    env = {'kernel': args.kernel, 'ksrc': args.ksrc, 'ferry_ko': args.ferry_ko,
           'ferryctl': args.ferryctl, 'selftest_ko': args.selftest_ko,
           # The debug kernel (make test-debug): slower, and leak-checked.
           'debug': os.environ.get('FERRY_DEBUG', '0') != '0'}
    passed = failed = 0
    results = []
    for c in cases:
        print(f'--- {c.group}: {c.name}', flush=True)
        try:
            r = harness.run_case(c, env, args.out)
        except Exception as e:  # a runner bug fails this case, not the run
            r = harness.Result(c.name, False, [f'runner error: {e!r}'], 0, [])
        results.append(r.as_dict())
        for name, ok, detail in r.subresults:
            print(f'{"ok  " if ok else "FAIL"} {c.name}/{name}' + ('' if ok else f': {detail}'))
            passed, failed = passed + ok, failed + (not ok)
        print(f'{"ok  " if r.ok else "FAIL"} {c.name} ({r.seconds:.0f} s)', flush=True)
        for reason in r.reasons:
            print('      ' + reason.replace('\n', '\n      '))
        passed, failed = passed + r.ok, failed + (not r.ok)
    if args.results:
        with open(args.results, 'w') as f:
            json.dump({'passed': passed, 'failed': failed, 'cases': results}, f, indent=1)
    print(f'vm: {passed} passed, {failed} failed')
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
