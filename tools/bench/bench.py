#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""`make bench`: ferry's messages and transfers side by side with perftest.

Boots one VM (rxe in loopback: two VMs on two cores starve each other) and,
for each round, runs every pair: the perftest tool on rxe0, then ferry_bench
over ferry on the same device, or the other way round in odd rounds. Reports
the median of each figure over the rounds and ferry's ratio to perftest, on
stdout and in a results file (Markdown, plus the raw figures as JSON).

Latency is one way: ib_send_lat's t_typical (the median of half the round
trip), and half of ferry_bench's median round trip. Throughput is bytes per
second, of the data alone.
"""
import argparse
import datetime
import json
import os
import re
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'testing', 'vm'))
from ferryvm import VM, VMError  # noqa: E402

ADDR = '192.0.2.1'
FERRY_PORT = 7471
PERF_PORT = 18515
PARAMS = '/sys/module/ferry_bench/parameters'

# name, ferry_bench mode, perftest tool, size, iterations, goal (ratio),
# sleeping: both sides wait for completions asleep instead of polling
# (perftest's -e, which uses completion events; ferry_bench poll=0), and
# ferry_bench's window and channels (requests in flight in all, and the
# channels they are spread over, window/channels on each).
PAIRS = [
    ('latency 64 B', 'lat', 'ib_send_lat', 64, 2000, ('<=', 1.3), False, (16, 1)),
    ('latency 4 KiB', 'lat', 'ib_send_lat', 4096, 1000, None, False, (16, 1)),
    ('latency 64 B, asleep', 'lat', 'ib_send_lat', 64, 2000, None, True, (16, 1)),
    # (ferry's receive buffers 256 bytes, not 4352: see NO_INLINE.)
    ('latency 64 B, no inline', 'lat', 'ib_send_lat', 64, 2000, None, False, (16, 1)),
    ('send 64 B', 'send', 'ib_send_bw', 64, 5000, None, False, (16, 1)),
    ('send 4 KiB', 'send', 'ib_send_bw', 4096, 2000, None, False, (16, 1)),
    ('send 32 KiB', 'send', 'ib_send_bw', 32768, 500, None, False, (16, 1)),
    ('requests 4 KiB from the peer, 2x32', 'write', 'ib_write_bw', 4096, 4000, None, False,
     (64, 2)),
    ('requests 4 KiB to the peer, 2x32', 'read', 'ib_read_bw', 4096, 4000, None, False,
     (64, 2)),
    ('write 64 KiB', 'write', 'ib_write_bw', 65536, 500, None, False, (16, 1)),
    ('write 1 MiB', 'write', 'ib_write_bw', 1 << 20, 100, ('>=', 0.8), False, (16, 1)),
]


def perftest(vm, tool, size, iters, sleeping):
    """Runs `tool` as server and client on rxe0; latency in ns or bytes/s."""
    common = f'-d rxe0 -F -s {size} -n {iters} -p {PERF_PORT}' + (' -e' if sleeping else '')
    # perftest's server accepts one client; the client retries until it listens.
    # (Bounded: ib_send_lat -e has been seen to hang on rxe.)
    tool = f'timeout 120 {tool}'
    out = vm.run(f'{tool} {common} >/tmp/perf-server.log 2>&1 & srv=$!; sleep 1; '
                 f'for i in 1 2 3 4 5; do {tool} {common} {ADDR} && break; sleep 1; done; '
                 f'kill $srv 2>/dev/null; wait $srv', timeout=600, check=False).out
    lines = out.splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith('#bytes') and i + 1 < len(lines):
            cols = line.split()
            vals = lines[i + 1].split()
            if tool.endswith('_lat'):  # (the tool's name ends the string)
                # t_typical: the median of half the round trip, in usec.
                return float(vals[cols.index('t_typical[usec]')]) * 1000
            # '#bytes #iterations BW peak[MB/sec] BW average[MB/sec] ...': the
            # fourth figure, in perftest's MB of 2^20 bytes.
            return float(vals[3]) * (1 << 20)
    raise VMError(f'{tool}: no result in its output:\n{out}')


# The rows whose session asks for no inline data (FERRY_NO_INLINE): its
# buffers hold a message alone.
NO_INLINE = {'latency 64 B, no inline'}


def ferry(vm, name, mode, size, iters, sleeping, spread):
    """Runs one ferry_bench mode; latency in ns or bytes/s."""
    window, channels = spread
    vm.run(f'echo {size} >{PARAMS}/size && echo {iters} >{PARAMS}/iters && '
           f'echo {0 if sleeping else 1} >{PARAMS}/poll && '
           f'echo {window} >{PARAMS}/window && echo {channels} >{PARAMS}/channels && '
           f'echo {0 if name in NO_INLINE else 1} >{PARAMS}/inline_data')
    r = vm.run(f'echo {mode} >{PARAMS}/run', timeout=600, check=False)
    got = vm.run(f'cat {PARAMS}/run').out
    fields = dict(f.split('=', 1) for f in got.split())
    if r.rc != 0 or 'error' in fields:
        raise VMError(f'ferry_bench {mode} {size}: {got.strip() or r.err.strip()}')
    return float(fields['lat_ns']) if mode == 'lat' else float(fields['bytes_per_s'])


def fmt(kind, v, size=0):
    if kind == 'lat':
        return f'{v / 1000:.1f} us'
    if size and size <= 4096:
        # Small transfers: the rate of operations says more.
        return f'{v / (1 << 20):.2f} MiB/s ({v / size / 1000:.1f} k/s)'
    return f'{v / (1 << 20):.2f} MiB/s'


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--kernel', required=True)
    ap.add_argument('--ferry-ko', required=True)
    ap.add_argument('--ferryctl', required=True)
    ap.add_argument('--rounds', type=int, default=5)
    ap.add_argument('--results', required=True, help='the Markdown results file to write')
    ap.add_argument('--only', nargs='*', default=[], help='run only these pairs (by mode)')
    ap.add_argument('--baseline-name', help='what the results call the baseline (its commit)')
    ap.add_argument('--baseline-ko', help='a ferry.ko from before a change, its ferry_bench.ko '
                    'beside it: measured in the same rounds, interleaved with the other two')
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error('--rounds must be at least 1')
    out = tempfile.mkdtemp(prefix='ferry-bench.')
    builds = {'ferry': args.ferry_ko}
    if args.baseline_ko:
        builds['baseline'] = args.baseline_ko
    pairs = [p for p in PAIRS if not args.only or p[1] in args.only]

    # The clock must not change under a run: keep the TSC, unwatched.
    vm = VM('bench', args.kernel, out, memory='2G', append=['tsc=reliable'])
    figures = {p[0]: {w: [] for w in ['perftest', *builds]} for p in pairs}
    loaded = [None]

    def load(which):
        """ferry.ko and ferry_bench.ko of build `which`, with the listener."""
        if loaded[0] == which:
            return
        ko = builds[which]
        bench_ko = os.path.join(os.path.dirname(ko), 'ferry_bench.ko')
        if loaded[0]:
            vm.run('rmmod ferry_bench ferry')
        vm.run(f'insmod {ko} && insmod {bench_ko} peer={ADDR} port={FERRY_PORT} && '
               f'{args.ferryctl} listener add {ADDR} port {FERRY_PORT}')
        loaded[0] = which

    def measure(which, name, mode, size, iters, sleeping, spread):
        load(which)
        return ferry(vm, name, mode, size, iters, sleeping, spread)

    try:
        print('booting the benchmark VM (QEMU/TCG, 2 vCPUs, 2 GiB)...', flush=True)
        vm.start()
        vm.run(f'ip link set eth0 up && ip addr add {ADDR}/24 dev eth0 && '
               'rdma link add rxe0 type rxe netdev eth0')
        load('ferry')
        clock = vm.run('cat /sys/devices/system/clocksource/clocksource0/current_clocksource').out
        for rnd in range(args.rounds):
            for name, mode, tool, size, iters, _, sleeping, spread in pairs:
                runs = [('perftest', lambda: perftest(vm, tool, size, iters, sleeping))]
                runs += [(b, lambda b=b: measure(b, name, mode, size, iters, sleeping, spread))
                         for b in builds]
                # Each takes each place in turn.
                turn = rnd % len(runs)
                for who, fn in runs[turn:] + runs[:turn]:
                    try:
                        v = fn()
                    except VMError as e:
                        # ib_send_lat -e sometimes hangs on rxe: that row
                        # is a reference, and goes on without the round.
                        if not (sleeping and who == 'perftest'):
                            raise
                        print(f'round {rnd + 1}/{args.rounds}: {name:14} {who:8} '
                              f'failed ({str(e).splitlines()[0]})', flush=True)
                        continue
                    figures[name][who].append(v)
                    print(f'round {rnd + 1}/{args.rounds}: {name:14} {who:8} '
                          f'{fmt(mode, v, size)}', flush=True)
        clock_after = vm.run('cat /sys/devices/system/clocksource/clocksource0/'
                             'current_clocksource').out
        problems = vm.kernel_problems()
        vm.run('rmmod ferry_bench ferry')
    except (VMError, KeyError, ValueError) as e:
        print(f'ERROR: {e!r}\nconsole: {vm.console_path}', file=sys.stderr)
        return 1
    finally:
        vm.stop()

    rows = []
    base = 'baseline' in builds
    for name, mode, tool, size, iters, goal, sleeping, _ in pairs:
        f = statistics.median(figures[name]['ferry'])
        extra = ()
        if base:
            b = statistics.median(figures[name]['baseline'])
            extra = (fmt(mode, b, size), f'{f / b:.2f}')
        if not figures[name]['perftest']:
            rows.append((name, tool + ' -e', 'failed every round', fmt(mode, f, size), '', '',
                         *extra))
            continue
        p = statistics.median(figures[name]['perftest'])
        ratio = f / p
        if goal:
            op, want = goal
            met = ratio <= want if op == '<=' else ratio >= want
            goal_s = f'{op} {want} ({"met" if met else "NOT met"})'
        else:
            goal_s = ''
        rows.append((name, tool + (' -e' if sleeping else ''), fmt(mode, p, size),
                     fmt(mode, f, size), f'{ratio:.2f}', goal_s, *extra))
    head = ('what', 'perftest tool', 'perftest', 'ferry', 'ferry / perftest', 'goal')
    if base:
        head += ('baseline', 'ferry / baseline')
    table = ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
    table += ['| ' + ' | '.join(r) + ' |' for r in rows]
    when = datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')
    text = '\n'.join([
        f'# ferry benchmark, {when}', '',
        f'One VM (QEMU/TCG, 2 vCPUs), soft-RoCE rxe0 in loopback, kernel '
        f'{vm.info.get("kernel", "?")}, clocksource {clock.strip()} (after: {clock_after.strip()}).',
        f'Medians of {args.rounds} interleaved rounds (of the rounds that gave a figure). '
        'Latency: one way (half the round trip). '
        'Throughput: data bytes per second; 1 MiB = 2^20 bytes.',
        'ferry: one channel; `send` streams messages, `write` has 16 requests in flight, '
        'each RDMA-WRITTEN by the peer into the requester\'s registered pages; the '
        '"2x32" rows have 32 requests in flight on each of 2 channels (ferry_submit_on()), '
        'written into the requester\'s pages (from the peer) or read from them (to the peer).',
        *(['baseline: ' + (args.baseline_name or args.baseline_ko) + ', measured in the same '
           'rounds, in turn with the others.'] if base else []),
        'Latency: perftest and ferry_bench poll for the answer; in the "asleep" row '
        'both sleep until it comes (ib_send_lat -e waits for completion events).', '',
        *table, ''])
    if problems:
        text += '\nkernel problems during the run:\n' + '\n'.join(problems) + '\n'
    print('\n' + text)
    with open(args.results, 'w') as f:
        f.write(text)
    with open(os.path.splitext(args.results)[0] + '.json', 'w') as f:
        json.dump({'when': when, 'rounds': args.rounds, 'figures': figures}, f, indent=1)
    print(f'results: {args.results}')
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
