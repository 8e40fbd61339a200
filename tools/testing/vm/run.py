#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Runs ferry's VM test cases and prints one line per test and a summary.

usage: run.py --kernel BZIMAGE --ksrc KSRC --ferry-ko KO --ferryctl BIN
              [--group integration|selftest|all] [--only NAME...] [--list]
              [--out DIR] [--results FILE] [--jobs N]

Cases of one kind (topology and kernel command line) run one after another on
the same VMs, which are reset between cases (harness.Pool); FERRY_BOOT_PER_CASE=1
boots fresh VMs for every case instead. With --jobs 2 (or FERRY_VM_JOBS=2) two
kinds run side by side, each on its own VMs.
"""
import argparse
import fnmatch
import json
import os
import shutil
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'cases'))

import harness  # noqa: E402
import foundation  # noqa: E402,F401  (registers cases)
import selftest  # noqa: E402,F401
import sessions  # noqa: E402,F401
import messages  # noqa: E402,F401
import hostile  # noqa: E402,F401
import blk  # noqa: E402,F401
import blktests  # noqa: E402,F401
import faults  # noqa: E402,F401


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
    ap.add_argument('--jobs', type=int, default=int(os.environ.get('FERRY_VM_JOBS', '1')))
    args = ap.parse_args()

    # `all` is every group but blktests' (make blktests asks for it).
    cases = [c for c in harness.CASES
             if (c.group == args.group or (args.group == 'all' and c.group != 'blktests'))
             and (not args.only or any(fnmatch.fnmatch(c.name, p) for p in args.only))]
    # A pattern that names no case is a mistake (a typo, or a shell that
    # expanded it): it fails the run instead of passing with fewer cases.
    unmatched = [p for p in args.only if not any(fnmatch.fnmatch(c.name, p) for c in harness.CASES)]
    if unmatched:
        print(f'run.py: no case matches {" ".join(unmatched)}', file=sys.stderr)
        return 2
    if args.list:
        for c in cases:
            print(f'{c.group:12} {c.topology:7} {c.name}')
        return 0
    env = {'kernel': args.kernel, 'ksrc': args.ksrc, 'ferry_ko': args.ferry_ko,
           'ferryctl': args.ferryctl, 'selftest_ko': args.selftest_ko,
           # The debug kernel (make test-debug): slower, and leak-checked.
           'debug': os.environ.get('FERRY_DEBUG', '0') != '0'}
    # Cases of one kind run back to back, in the order their kind first appears.
    kinds = {}
    for c in cases:
        kinds.setdefault((c.topology, tuple(c.append)), []).append(c)
    jobs = max(1, min(args.jobs, len(kinds)))
    env['jobs'] = jobs
    lanes = [[] for _ in range(jobs)]
    # Side by side, the largest kinds are spread first.
    for group in (kinds.values() if jobs == 1 else sorted(kinds.values(), key=len, reverse=True)):
        min(lanes, key=lambda lane: sum(len(g) for g in lane)).append(group)
    reuse = not harness.boot_per_case()
    print(f'vm: {len(cases)} cases in {len(kinds)} kinds, {jobs} at a time, '
          f'{"VMs reused between cases" if reuse else "a boot per case"}', flush=True)

    shutil.rmtree(os.path.join(args.out, '_vms'), ignore_errors=True)
    totals = {'passed': 0, 'failed': 0, 'boots': 0, 'boot_seconds': 0.0}
    results = []
    out_lock = threading.Lock()

    def run_lane(lane):
        pool = harness.Pool(env, os.path.join(args.out, '_vms', f'lane{lanes.index(lane)}'), reuse)
        try:
            for c in (c for group in lane for c in group):
                if jobs == 1:
                    print(f'--- {c.group}: {c.name}', flush=True)
                try:
                    r = harness.run_case(c, env, args.out, pool)
                except Exception as e:  # a runner bug fails this case, not the run
                    pool.discard()
                    r = harness.Result(c.name, False, [f'runner error: {e!r}'], 0, [])
                with out_lock:
                    report(c, r)
        finally:
            pool.discard()

    def report(c, r):
        results.append(r.as_dict())
        if jobs > 1:
            print(f'--- {c.group}: {c.name}')
        for name, ok, detail in r.subresults:
            print(f'{"ok  " if ok else "FAIL"} {c.name}/{name}' + ('' if ok else f': {detail}'))
            totals['passed' if ok else 'failed'] += 1
        boots = f'{r.boots} boot{"" if r.boots == 1 else "s"}'
        if r.boots:
            boots += f' in {r.boot_seconds:.0f} s'
        print(f'{"ok  " if r.ok else "FAIL"} {c.name} ({r.seconds:.0f} s, {boots})', flush=True)
        for reason in r.reasons:
            print('      ' + reason.replace('\n', '\n      '))
        totals['passed' if r.ok else 'failed'] += 1
        totals['boots'] += r.boots
        totals['boot_seconds'] += r.boot_seconds

    start = time.monotonic()
    threads = [threading.Thread(target=run_lane, args=(lane,)) for lane in lanes]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    seconds = time.monotonic() - start
    passed, failed = totals['passed'], totals['failed']
    # Boots inside a case (a VM killed and started again) count too; self-test
    # cases that boot VMs of their own report theirs.
    # Side by side, boot time of one lane overlaps work in the other: the
    # share is of the lanes' summed time then.
    share = totals['boot_seconds'] / max(1.0, seconds * jobs)
    print(f'vm: {len(cases)} cases in {seconds:.0f} s from the first VM start, '
          f'{totals["boots"]} VM boots taking {totals["boot_seconds"]:.0f} s '
          f'({share:.0%})', flush=True)
    if args.results:
        with open(args.results, 'w') as f:
            json.dump({'passed': passed, 'failed': failed, 'seconds': round(seconds),
                       'boots': totals['boots'], 'boot_seconds': round(totals['boot_seconds']),
                       'cases': results}, f, indent=1)
    print(f'vm: {passed} passed, {failed} failed')
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
