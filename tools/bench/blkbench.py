#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""`make bench`, block part: ferry_blk beside nvme-rdma and RNBD.

Boots one VM (QEMU/TCG, 2 vCPUs; rxe in loopback) and gives each system a
RAM disk of its own, of the same size, filled before any read: ferry_blk
exports its disk over ferry and maps it back, nvmet-rdma exports its disk to
nvme-rdma, rnbd-server to rnbd-client, and the fourth disk is read and
written directly (the ceiling). The RAM disks are brd's (built into the
test kernel), which complete in the submitter's context. Every system
acknowledges a write only once its backing bio has ended (nvmet's bdev
namespace, rnbd-server's bios, ferry_blk's).

Each row is one fio job (libaio, O_DIRECT, 5 s); each system has as many
queues as ferry_blk's disk has channels, and one polled queue more: the
polled rows read through io_uring with IORING_SETUP_IOPOLL (fio --hipri),
whose I/O only the polled queues take (ferry_blk's `poll-queues`,
nvme-rdma's and RNBD's `nr_poll_queues`); the RAM disk, which cannot be
polled, reads through io_uring without it. For each of `--rounds` rounds,
every row runs on every system, the systems' order rotating from round to
round. Reported per row and system: the median and the min-max over the
rounds of IOPS (4 KiB rows) or bandwidth, mean and p99 latency, and system
CPU time per I/O (from /proc/stat around the row: system, irq and softirq
time of both CPUs, kernel threads included). The best peer is the one with
the better median; ferry_blk's ratio to it is the median of the per-round
ratios. A row that fails is reported failed and the run goes on.
"""
import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'testing', 'vm'))
from ferryvm import VM, VMError  # noqa: E402

ADDR = '192.0.2.1'
FERRY_PORT = 7473
NVME_PORT = 4420
NQN = 'nqn.2014-08.org.example:ferry-bench'
NVMET = '/sys/kernel/config/nvmet'
DISK_MIB = 256
QUEUES = 2
POLL_QUEUES = 1
SECONDS = 5

# name, fio rw, block size, queue depth, read share of a mix (or None),
# and whether polled (io_uring --hipri on the polled queues).
ROWS = [
    ('4k randread QD1', 'randread', 4096, 1, None),
    ('4k randwrite QD1', 'randwrite', 4096, 1, None),
    ('4k randread QD32', 'randread', 4096, 32, None),
    ('4k randwrite QD32', 'randwrite', 4096, 32, None),
    ('4k randrw 70/30 QD16', 'randrw', 4096, 16, 70),
    ('4k randread QD1, polled', 'randread', 4096, 1, None, True),
    ('4k randread QD32, polled', 'randread', 4096, 32, None, True),
    ('128k read QD8', 'read', 128 << 10, 8, None),
    ('128k write QD8', 'write', 128 << 10, 8, None),
    ('1M read QD4', 'read', 1 << 20, 4, None),
    ('1M write QD4', 'write', 1 << 20, 4, None),
]

# How the cost grows, for ferry_blk and the peers: name, x-axis label,
# y-axis figure, and the points (label, fio rw, block size, queue depth,
# jobs).
SCALING = [
    ('4k randread: IOPS against queue depth', 'queue depth', 'iops',
     [(qd, 'randread', 4096, qd, 1) for qd in (1, 2, 4, 8, 16, 32, 64)]),
    ('read at QD8: MB/s against block size', 'block size (KiB)', 'bw',
     [(bs >> 10, 'read', bs, 8, 1) for bs in (4096, 16384, 65536, 131072, 262144, 1 << 20)]),
    ('4k randread QD8 a job: IOPS against jobs', 'fio jobs, pinned over the 2 CPUs', 'iops',
     [(jobs, 'randread', 4096, 8, jobs) for jobs in (1, 2, 4)]),
]

# The systems compared with ferry_blk, and the ceiling.
PEERS = ['nvme-rdma', 'rnbd']
LOCAL = 'local'


def main_figure(row):
    """The row's headline: IOPS at 4 KiB, bandwidth above."""
    return 'iops' if row[2] <= 4096 else 'bw'


class Bench:
    """The VM and the systems set up in it."""

    def __init__(self, vm, ferryctl, builds):
        self.vm = vm
        self.ferryctl = ferryctl
        self.builds = builds
        self.loaded = None
        self.disk = {}

    # --- setup -----------------------------------------------------------
    def ramdisk(self, n):
        """brd's /dev/ram<n> (DISK_MIB MiB, from the kernel's command line),
        filled with data fio makes (pages never written would read as
        zeroes, without a copy): its path."""
        path = f'/dev/ram{n}'
        self.vm.run(f'fio --name=fill --filename={path} --rw=write --bs=1m --direct=1 '
                    f'--ioengine=libaio --iodepth=4 --size=100% --output=/dev/null', timeout=600)
        return path

    def setup(self):
        vm = self.vm
        vm.run(f'ip link set eth0 up && ip addr add {ADDR}/24 dev eth0 && '
               'rdma link add rxe0 type rxe netdev eth0')
        vm.run('mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config')
        self.backing = {s: self.ramdisk(n) for n, s in enumerate(['ferry_blk', *PEERS, LOCAL])}
        self.disk[LOCAL] = self.backing[LOCAL]
        # nvmet-rdma, and nvme-rdma with QUEUES I/O queues.
        ns = f'{NVMET}/subsystems/{NQN}'
        vm.run(f'mkdir {ns} && echo 1 > {ns}/attr_allow_any_host && '
               f'mkdir {ns}/namespaces/1 && '
               f'echo {self.backing["nvme-rdma"]} > {ns}/namespaces/1/device_path && '
               f'echo 1 > {ns}/namespaces/1/enable && '
               f'mkdir {NVMET}/ports/1 && echo rdma > {NVMET}/ports/1/addr_trtype && '
               f'echo ipv4 > {NVMET}/ports/1/addr_adrfam && '
               f'echo {ADDR} > {NVMET}/ports/1/addr_traddr && '
               f'echo {NVME_PORT} > {NVMET}/ports/1/addr_trsvcid && '
               f'ln -s {ns} {NVMET}/ports/1/subsystems/{NQN}')
        vm.run(f'echo "transport=rdma,traddr={ADDR},trsvcid={NVME_PORT},nqn={NQN},'
               f'nr_io_queues={QUEUES},nr_poll_queues={POLL_QUEUES}" > /dev/nvme-fabrics')
        ctrl = vm.run(f'grep -l {NQN} /sys/class/nvme/*/subsysnqn').out.split('/')[4]
        vm.wait_for(f'ls -d /sys/class/nvme/{ctrl}/nvme*n1', timeout=60)
        ns_name = vm.run(f'ls -d /sys/class/nvme/{ctrl}/nvme*n1').out.split()[0].rsplit('/', 1)[1]
        vm.wait_for(f'test -b /dev/{ns_name}', timeout=30)
        self.disk['nvme-rdma'] = f'/dev/{ns_name}'
        # rnbd-server listens on every address (built in); rnbd-client maps.
        vm.run(f'echo "sessname=bench path=ip:{ADDR} device_path={self.backing["rnbd"]} '
               f'nr_poll_queues={POLL_QUEUES}" > /sys/devices/virtual/rnbd-client/ctl/map_device')
        vm.wait_for('ls -d /sys/block/rnbd*', timeout=60)
        rn = vm.run('ls -d /sys/block/rnbd*').out.split()[0].rsplit('/', 1)[1]
        vm.wait_for(f'test -b /dev/{rn}', timeout=30)
        self.disk['rnbd'] = f'/dev/{rn}'
        self.use('ferry_blk')

    def use(self, system):
        """ferry_blk of build `system` (this tree's, or the baseline's)
        loaded, exported and mapped, if it is a ferry_blk."""
        if system not in self.builds or self.loaded == system:
            return
        vm, ctl = self.vm, self.ferryctl
        if self.loaded:
            vm.run(f'{ctl} blk unmap {self.disk[self.loaded]} && {ctl} blk export del bench && '
                   'rmmod ferry_blk ferry')
            del self.disk[self.loaded]
        ko = self.builds[system]
        blk_ko = os.path.join(os.path.dirname(ko), 'ferry_blk.ko')
        vm.run(f'insmod {ko} && insmod {blk_ko} && '
               f'{ctl} listener add {ADDR} port {FERRY_PORT} && '
               f'{ctl} blk export add bench path {self.backing["ferry_blk"]}')
        mapped = vm.run(f'{ctl} -j blk map {ADDR} port {FERRY_PORT} export bench '
                        f'channels {QUEUES} poll-queues {POLL_QUEUES}', check=False)
        if mapped.rc != 0:
            # A build from before polled queues: its polled rows fail.
            print(f'{system}: mapped without polled queues ({mapped.err.strip()[-200:]})',
                  flush=True)
            mapped = vm.run(f'{ctl} -j blk map {ADDR} port {FERRY_PORT} export bench '
                            f'channels {QUEUES}')
        m = json.loads(mapped.out)
        disk = '/dev/' + m[0]['disk']
        vm.wait_for(f'test -b {disk}', timeout=30)
        self.disk[system] = disk
        self.loaded = system

    # --- one figure ------------------------------------------------------
    def fio(self, system, rw, bs, qd, mix=None, polled=False, jobs=1):
        """Runs one fio job (`jobs` of them, pinned, reported as one) on
        `system`'s disk, `polled` or not: its figures."""
        self.use(system)
        disk = self.disk[system]
        engine = 'libaio'
        if polled:
            engine = 'io_uring' + (' --hipri' if system != LOCAL else '')
        job = (f'fio --name=row --filename={disk} --direct=1 --ioengine={engine} --rw={rw} '
               f'--bs={bs} --iodepth={qd} --runtime={SECONDS} --time_based --norandommap '
               f'--randrepeat=0 --lat_percentiles=1 --output-format=json --output=/tmp/row.json'
               + (f' --rwmixread={mix}' if mix else '')
               + (f' --numjobs={jobs} --cpus_allowed=0-1 --cpus_allowed_policy=split '
                  '--group_reporting' if jobs > 1 else ''))
        r = self.vm.run(f'head -1 /proc/stat; {job}; rc=$?; head -1 /proc/stat; exit $rc',
                        timeout=SECONDS * 12 + 60, check=False)
        if r.rc != 0:
            raise VMError(f'fio on {disk} exited {r.rc}: {r.err.strip()[-300:]}')
        stat = [x.split() for x in r.out.splitlines() if x.startswith('cpu ')]
        job = json.loads(self.vm.run('cat /tmp/row.json').out)['jobs'][0]
        return figures(job, stat, self.vm.run('getconf CLK_TCK').out)


def figures(job, stat, clk_tck):
    """One row's figures from fio's JSON job and the two `cpu` lines of
    /proc/stat around it."""
    ios = 0
    iops = 0.0
    bw = 0.0
    lat_sum = 0.0
    p99 = 0.0
    for d in ('read', 'write'):
        x = job[d]
        n = x['total_ios']
        if not n:
            continue
        ios += n
        iops += x['iops']
        bw += x['bw_bytes']
        lat_sum += x['lat_ns']['mean'] * n
        # (Submission to completion, as the mean: --lat_percentiles.)
        p99 = max(p99, x['lat_ns'].get('percentile', {}).get('99.000000', 0))
    if not ios:
        raise ValueError('fio did no I/O')
    # user nice system idle iowait irq softirq: system, irq, softirq.
    before, after = ([int(v) for v in s[1:8]] for s in stat)
    ticks = sum(after[i] - before[i] for i in (2, 5, 6))
    return {
        'iops': iops,
        'bw': bw,
        'lat_us': lat_sum / ios / 1000,
        'p99_us': p99 / 1000,
        'cpu_us_per_io': ticks * 1e6 / int(clk_tck) / ios,
    }


def fmt(kind, v):
    if v is None:
        return 'failed'
    if kind == 'iops':
        return f'{v:.0f}'
    if kind == 'bw':
        return f'{v / 1e6:.1f}'
    return f'{v:.0f}'


def spread(kind, vals):
    """'median (min-max)' of the figures that were taken."""
    vals = [v for v in vals if v is not None]
    if not vals:
        return 'failed'
    return f'{fmt(kind, statistics.median(vals))} ({fmt(kind, min(vals))}-{fmt(kind, max(vals))})'


def median(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def summarize(rows, systems, figs):
    """The Markdown tables: per row the headline figure of every system,
    the best peer, and ferry_blk's ratios; then latency and CPU."""
    head = ['row', 'unit', *systems, 'best peer',
            'ferry_blk / best peer (median of per-round ratios)',
            'mean latency / best peer', 'CPU per I/O / best peer']
    if 'baseline' in systems:
        head += ['ferry_blk / baseline', 'mean latency / baseline', 'CPU per I/O / baseline']
    table = ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
    lat_head = ['row', *[f'{s} mean / p99 (us)' for s in systems],
                *[f'{s} CPU us per I/O' for s in systems]]
    lat = ['| ' + ' | '.join(lat_head) + ' |', '|' + '---|' * len(lat_head)]
    ratios = {}
    for row in rows:
        name = row[0]
        kind = main_figure(row)
        unit = 'IOPS' if kind == 'iops' else 'MB/s'

        def per_round(s, key):
            return [f[key] if f else None for f in figs[name][s]]

        cells = [spread(kind, per_round(s, kind)) for s in systems]
        peer_meds = {p: median(per_round(p, kind)) for p in PEERS if p in systems}
        peer_meds = {p: v for p, v in peer_meds.items() if v is not None}
        best = max(peer_meds, key=peer_meds.get) if peer_meds else None

        def ratio(a, b, key):
            rs = [x / y for x, y in zip(per_round(a, key), per_round(b, key))
                  if x is not None and y]
            return statistics.median(rs) if rs else None

        r = {}
        if best:
            r = {'main': ratio('ferry_blk', best, kind), 'lat': ratio('ferry_blk', best, 'lat_us'),
                 'cpu': ratio('ferry_blk', best, 'cpu_us_per_io')}
        missing = 'failed' if any(p in systems for p in PEERS) else '-'
        cols = [name, unit, *cells, best or missing,
                *[f'{r[k]:.2f}' if r.get(k) is not None else missing
                  for k in ('main', 'lat', 'cpu')]]
        if 'baseline' in systems:
            for k, key in (('baseline', kind), ('baseline_lat', 'lat_us'),
                           ('baseline_cpu', 'cpu_us_per_io')):
                b = ratio('ferry_blk', 'baseline', key)
                cols.append(f'{b:.2f}' if b is not None else 'failed')
                r[k] = b
        ratios[name] = {'best_peer': best, **r}
        table.append('| ' + ' | '.join(cols) + ' |')
        lat.append('| ' + ' | '.join(
            [name]
            + [f'{fmt("us", median(per_round(s, "lat_us")))} / '
               f'{fmt("us", median(per_round(s, "p99_us")))}' for s in systems]
            + [spread('us', per_round(s, 'cpu_us_per_io')) for s in systems]) + ' |')
    return table, lat, ratios


def scaling_summary(scaling):
    """The curves for the charts, and a Markdown table for each: every
    system's median (min-max) at every point."""
    curves, text = {}, []
    for name, xlabel, key, points in SCALING:
        labels = [p[0] for p in points]
        # Each system's figures by point, in the points' order (a report
        # read back from JSON has the points' labels as strings).
        per = {s: {x: by.get(x, by.get(str(x), [])) for x in labels}
               for s, by in scaling[name].items()}
        curves[name] = {
            'xlabel': xlabel, 'ylabel': 'IOPS' if key == 'iops' else 'MB/s',
            'xs': labels, 'labels': labels,
            'systems': {s: [{'x': x, 'median': median(v) if key == 'iops' else
                             (median(v) / 1e6 if median(v) is not None else None),
                             'values': v} for x, v in per[s].items()] for s in per},
        }
        head = [xlabel, *per]
        text += [f'## {name}', '', '| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
        for x in labels:
            text.append('| ' + ' | '.join([str(x), *[spread(key, per[s][x]) for s in per]]) + ' |')
        text.append('')
    return curves, text


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--kernel')
    ap.add_argument('--ferry-ko', help='ferry.ko, ferry_blk.ko beside it')
    ap.add_argument('--ferryctl')
    ap.add_argument('--rounds', type=int, default=5)
    ap.add_argument('--results', required=True, help='the Markdown results file to write')
    ap.add_argument('--only', nargs='*', default=[], help='run only these rows (by name)')
    ap.add_argument('--scaling-rounds', type=int, default=3,
                    help='rounds of the scaling curves (0: none)')
    ap.add_argument('--ferry-only', action='store_true',
                    help='measure ferry_blk (and the baseline) alone: a quick before-and-after')
    ap.add_argument('--baseline-ko', help='a ferry.ko from before a change, its ferry_blk.ko '
                    'beside it: measured in the same rounds, in turn with the others')
    ap.add_argument('--baseline-name', help='what the report calls the baseline (its commit)')
    ap.add_argument('--from-json', help='no run: the report again from the JSON of an earlier '
                    'one (with --baseline-ko naming its baseline if it does not)')
    args = ap.parse_args()
    if args.from_json:
        with open(args.from_json) as f:
            data = json.load(f)
        data.setdefault('baseline', args.baseline_name or args.baseline_ko)
        report(data, args.results)
        return 0
    if args.rounds < 1:
        ap.error('--rounds must be at least 1')
    if not (args.kernel and args.ferry_ko and args.ferryctl):
        ap.error('--kernel, --ferry-ko and --ferryctl are needed for a run')
    rows = [r for r in ROWS if not args.only or r[0] in args.only]
    builds = {'ferry_blk': args.ferry_ko}
    if args.baseline_ko:
        builds['baseline'] = args.baseline_ko
    systems = ['ferry_blk', *(['baseline'] if args.baseline_ko else [])]
    if not args.ferry_only:
        systems += [*PEERS, LOCAL]
    figs = {r[0]: {s: [] for s in systems} for r in rows}
    out = tempfile.mkdtemp(prefix='ferry-blkbench.')
    vm = VM('blkbench', args.kernel, out, memory='3G',
            append=['tsc=reliable', f'brd.rd_size={DISK_MIB * 1024}'])
    bench = Bench(vm, args.ferryctl, builds)
    try:
        print('booting the benchmark VM (QEMU/TCG, 2 vCPUs, 3 GiB)...', flush=True)
        vm.start()
        bench.setup()
        for rnd in range(args.rounds):
            # Each system takes each place in turn.
            turn = rnd % len(systems)
            order = systems[turn:] + systems[:turn]
            for row in rows:
                for s in order:
                    try:
                        f = bench.fio(s, *row[1:])
                    except (VMError, ValueError, KeyError, json.JSONDecodeError) as e:
                        print(f'round {rnd + 1}/{args.rounds}: {row[0]:22} {s:10} failed: '
                              f'{str(e).splitlines()[0][:200]}', flush=True)
                        f = None
                    figs[row[0]][s].append(f)
                    if f:
                        print(f'round {rnd + 1}/{args.rounds}: {row[0]:22} {s:10} '
                              f'{f["iops"]:8.0f} IOPS {f["bw"] / 1e6:7.1f} MB/s '
                              f'lat {f["lat_us"]:7.0f} us p99 {f["p99_us"]:7.0f} us '
                              f'CPU {f["cpu_us_per_io"]:6.0f} us/IO', flush=True)
        scaling = {c[0]: {s: {p[0]: [] for p in c[3]} for s in systems if s != LOCAL}
                   for c in SCALING}
        curve_systems = [s for s in systems if s != LOCAL]
        for rnd in range(args.scaling_rounds):
            turn = rnd % len(curve_systems)
            order = curve_systems[turn:] + curve_systems[:turn]
            for name, _, key, points in SCALING:
                for label, rw, bs, qd, jobs in points:
                    for s in order:
                        try:
                            f = bench.fio(s, rw, bs, qd, jobs=jobs)
                        except (VMError, ValueError, KeyError, json.JSONDecodeError) as e:
                            print(f'scaling {rnd + 1}/{args.scaling_rounds}: {name}, {label}: '
                                  f'{s} failed: {str(e).splitlines()[0][:200]}', flush=True)
                            f = None
                        scaling[name][s][label].append(f[key] if f else None)
                        if f:
                            print(f'scaling {rnd + 1}/{args.scaling_rounds}: {name}, {label}: '
                                  f'{s} {fmt(key, f[key])}', flush=True)
        problems = vm.kernel_problems()
    except VMError as e:
        print(f'ERROR: {e!r}\nconsole: {vm.console_path}', file=sys.stderr)
        return 1
    finally:
        vm.stop()

    when = datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')
    data = {'when': when, 'kernel': vm.info.get('kernel', '?'), 'rounds': args.rounds,
            'systems': systems, 'rows': [r[0] for r in rows], 'figures': figs,
            'scaling_rounds': args.scaling_rounds, 'scaling_raw': scaling,
            'baseline': args.baseline_name or args.baseline_ko, 'problems': problems}
    report(data, args.results)
    return 1 if problems else 0


def report(data, results):
    """Writes the Markdown report of `data` (what a run measured) to
    `results`, and every figure, with the ratios and curves, as JSON beside
    it."""
    rows = [r for r in ROWS if r[0] in data['rows']]
    systems = data['systems']
    table, lat, ratios = summarize(rows, systems, data['figures'])
    scaling = data.get('scaling_raw')
    if scaling is None:
        # (A report written before the raw curves were kept: the curves'
        # own values.)
        scaling = {n: {s: {p['x']: p['values'] for p in pts} for s, pts in c['systems'].items()}
                   for n, c in data.get('scaling', {}).items()}
    curves, curve_tables = scaling_summary(scaling) if data['scaling_rounds'] else ({}, [])
    base = data.get('baseline')
    text = '\n'.join([
        f'# ferry_blk beside nvme-rdma and RNBD, {data["when"]}', '',
        f'One VM (QEMU/TCG, 2 vCPUs), soft-RoCE rxe0 in loopback, kernel '
        f'{data.get("kernel", "?")}. Each system on its own {DISK_MIB} MiB RAM disk '
        '(brd), filled before '
        f'the rounds; {QUEUES} queues each (ferry_blk channels, nvme-rdma nr_io_queues; '
        f'RNBD has one per CPU) and {POLL_QUEUES} polled (ferry_blk poll-queues, nvme-rdma '
        'and RNBD nr_poll_queues); "local" is the RAM disk itself. fio: libaio, O_DIRECT, '
        f'one job, {SECONDS} s a row; the polled rows io_uring --hipri (the RAM disk: '
        f'io_uring, not polled); {data["rounds"]} rounds, the systems\' order rotating.',
        'Figures: median (min-max) over the rounds; MB/s is 10^6 bytes a second. The best '
        'peer is the one with the better median; the ratios are the medians of the '
        'per-round ratios (above 1 is better for IOPS and MB/s, below 1 for latency and '
        'CPU). CPU per I/O: system, irq and softirq time of both CPUs over the row, '
        'divided by its I/Os.',
        *([f'baseline: {base}, measured in the same rounds.'] if base else []), '',
        *table, '', '## Latency and CPU', '', *lat, '', *curve_tables])
    if data.get('problems'):
        text += '\nkernel problems during the run:\n' + '\n'.join(data['problems']) + '\n'
    print('\n' + text)
    with open(results, 'w') as f:
        f.write(text)
    with open(os.path.splitext(results)[0] + '.json', 'w') as f:
        json.dump({**data, 'scaling_raw': scaling,
                   'headline': {r[0]: main_figure(r) for r in rows},
                   'ratios': ratios, 'scaling': curves}, f, indent=1)
    print(f'results: {results}')


if __name__ == '__main__':
    sys.exit(main())
