#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""`make profile`: where a 4 KiB read at queue depth 1 spends its CPU time,
in ferry_blk and in nvme-rdma, side by side.

Boots the block benchmark's VM (see blkbench.py: QEMU/TCG, 2 vCPUs, rxe in
loopback, each system on its own brd RAM disk) and, for each system, samples
every CPU with perf (`cpu-clock`, the only clock a guest under TCG has: no
PMU) while fio reads 4 KiB at random, one at a time. Reports, per system,
the I/Os done, the samples per I/O, the share of samples by module (the
kernel itself, ferry, ferry_blk, rdma_rxe, ib_core, nvme-rdma, ...) and the
symbols that took the most, in tools/bench/out/profile.md, with perf's
full reports beside it (profile-<system>.txt).

Sampling by the clock under TCG charges the emulator's cost of each guest
instruction to the guest code that runs it: the shares say where the
guest's time goes, not what a real CPU would spend there.
"""
import argparse
import datetime
import json
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'testing', 'vm'))
from blkbench import DISK_MIB, Bench  # noqa: E402
from ferryvm import VM, VMError  # noqa: E402

SYSTEMS = ['ferry_blk', 'nvme-rdma']
SECONDS = 20
FREQ = 999
TOP = 30


def profile(bench, system):
    """Samples both CPUs while fio reads `system`'s disk: (I/Os, samples,
    perf's report by module, by symbol, and by symbol with its callees)."""
    vm = bench.vm
    bench.use(system)
    disk = bench.disk[system]
    data = f'/tmp/perf-{system}.data'
    job = (f'fio --name=profile --filename={disk} --direct=1 --ioengine=libaio '
           f'--rw=randread --bs=4096 --iodepth=1 --runtime={SECONDS} --time_based '
           f'--norandommap --randrepeat=0 --output-format=json --output=/tmp/profile.json')
    r = vm.run(f'grep -E "^(ctxt|intr)" /proc/stat; '
               f'perf record -q -a -g -e cpu-clock -F {FREQ} -o {data} -- {job}; rc=$?; '
               f'grep -E "^(ctxt|intr)" /proc/stat; exit $rc',
               timeout=SECONDS * 10 + 120, check=False)
    if r.rc != 0:
        raise VMError(f'perf record on {disk} exited {r.rc}: {r.err.strip()[-300:]}')
    ios = json.loads(vm.run('cat /tmp/profile.json').out)['jobs'][0]['read']['total_ios']
    # Context switches and interrupts, before and after.
    counts = {}
    for line in r.out.splitlines():
        if line.startswith(('ctxt ', 'intr ')):
            counts.setdefault(line.split()[0], []).append(int(line.split()[1]))
    switches = {k: (v[1] - v[0]) / max(ios, 1) for k, v in counts.items() if len(v) == 2}
    # (Modules' symbols from the running kernel's table.)
    report = f'perf report -i {data} --kallsyms=/proc/kallsyms --stdio -q'
    common = f'{report} -g none --percent-limit 0.3'
    by_dso = vm.run(f'{common} --no-children --sort dso', timeout=900).out
    by_sym = vm.run(f'{common} --no-children --sort dso,sym', timeout=900).out
    # With what they call: the time under each function, the paths' costs.
    under = vm.run(f'{common} --children --sort sym', timeout=900).out
    # Which paths the sections with interrupts off belong to.
    irq = vm.run(f'{report} --no-children --sort sym -S _raw_spin_unlock_irqrestore '
                 f'-g caller,0.5,callee,function,percent', timeout=900).out
    samples = int(vm.run(f'perf script -i {data} -G -F ip 2>/dev/null | wc -l',
                         timeout=900).out)
    return (ios, samples, by_dso, by_sym,
            under + '\n# what ends in _raw_spin_unlock_irqrestore\n' + irq, switches)


def table(rows, head):
    out = ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
    out += ['| ' + ' | '.join(str(c) for c in r) + ' |' for r in rows]
    return out


def parse(report):
    """perf's '  12.34%  name [...]' lines: (percent, the rest)."""
    got = []
    for line in report.splitlines():
        # (With --children, the self share follows: left out.)
        m = re.match(r'\s*([\d.]+)%\s+(?:[\d.]+%\s+)?(.*\S)', line)
        if m:
            got.append((float(m.group(1)), re.sub(r'\s+', ' ', m.group(2))))
    return got


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--kernel', required=True)
    ap.add_argument('--ferry-ko', required=True, help='ferry.ko, ferry_blk.ko beside it')
    ap.add_argument('--ferryctl', required=True)
    ap.add_argument('--out', required=True, help='the directory of the reports')
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix='ferry-profile.')
    vm = VM('profile', args.kernel, tmp, memory='3G',
            append=['tsc=reliable', f'brd.rd_size={DISK_MIB * 1024}'])
    bench = Bench(vm, args.ferryctl, {'ferry_blk': args.ferry_ko})
    results = {}
    try:
        print('booting the profiling VM (QEMU/TCG, 2 vCPUs, 3 GiB)...', flush=True)
        vm.start()
        vm.run('echo -1 > /proc/sys/kernel/perf_event_paranoid && '
               'echo 0 > /proc/sys/kernel/kptr_restrict')
        bench.setup()
        for system in SYSTEMS:
            print(f'profiling {system}: 4k randread QD1 for {SECONDS} s...', flush=True)
            results[system] = profile(bench, system)
            ios, samples = results[system][:2]
            print(f'{system}: {ios} I/Os, {samples} samples', flush=True)
        problems = vm.kernel_problems()
    except (VMError, StopIteration, ValueError) as e:
        print(f'ERROR: {e!r}\nconsole: {vm.console_path}', file=sys.stderr)
        return 1
    finally:
        vm.stop()

    os.makedirs(args.out, exist_ok=True)
    when = datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')
    text = ['# Where a 4 KiB read at QD1 spends its CPU time', '',
            f'`make profile`, {when}, kernel {vm.info.get("kernel", "?")}: perf samples '
            f'both CPUs ({FREQ} Hz, `cpu-clock`) while fio reads 4 KiB at random, one at a '
            f'time, for {SECONDS} s on each system\'s disk (see tools/bench/profile.py; '
            'under TCG the shares say where the guest\'s time goes, not what a real CPU '
            'would spend).', '']
    summary = []
    # A sample stands for 1/FREQ s of a CPU: microseconds of CPU per I/O.
    us = 1e6 / FREQ
    for system, (ios, samples, by_dso, by_sym, under, switches) in results.items():
        idle = sum(p for p, name in parse(by_sym) if name.endswith('default_idle'))
        busy = samples * (1 - idle / 100)
        summary.append((system, ios, samples, f'{100 - idle:.1f}%', f'{busy * us / max(ios, 1):.0f}',
                        f'{switches.get("ctxt", 0):.2f}', f'{switches.get("intr", 0):.2f}'))
        with open(os.path.join(args.out, f'profile-{system}.txt'), 'w') as f:
            f.write(f'# {system}: {ios} I/Os, {samples} samples\n\n# by module\n{by_dso}\n'
                    f'# by module and symbol\n{by_sym}\n# with what they call\n{under}')
    text += table(summary, ['system', 'I/Os', 'samples', 'busy', 'CPU us per I/O (busy)',
                            'context switches per I/O', 'interrupts per I/O']) + ['']
    text += ['Interrupts are off in much of the I/O path, and the sampling clock\'s interrupt '
             'waits for them: the time of such a section lands on the function that turns '
             'them back on (`_raw_spin_unlock_irqrestore`); the table of what each function '
             'calls puts it under the paths it belongs to.', '']
    for system, (ios, samples, by_dso, by_sym, under, _) in results.items():
        per_io = samples * us / max(ios, 1)
        text += [f'## {system}', '', 'By module (share of all samples, and CPU us per I/O):', '']
        text += table([(name, f'{p:.1f}%', f'{p / 100 * per_io:.0f}')
                       for p, name in parse(by_dso)], ['module', 'share', 'us per I/O'])
        text += ['', f'The {TOP} symbols that took the most themselves:', '']
        text += table([(name, f'{p:.1f}%', f'{p / 100 * per_io:.0f}')
                       for p, name in parse(by_sym)[:TOP]],
                      ['module and symbol', 'share', 'us per I/O'])
        text += ['', f'The {TOP} functions with the most under them (what they call included; '
                 'the idle loop and the sampling clock\'s own path left out):', '']
        skip = ('default_idle', 'do_idle', 'cpu_startup_entry', 'start_secondary',
                'common_startup_64', 'rest_init', 'start_kernel', 'x86_64_start',
                'arch_cpu_idle', 'default_idle_call', 'cpuidle_idle_call', 'secondary_startup_64',
                'call_cpuidle', 'pv_native_safe_halt', 'asm_sysvec_apic_timer_interrupt',
                'sysvec_apic_timer_interrupt')
        rows = [(name, f'{p:.1f}%', f'{p / 100 * per_io:.0f}') for p, name in parse(under)
                if not any(k in name for k in skip)]
        text += table(rows[:TOP], ['function', 'share', 'us per I/O'])
        text += ['']
    if problems:
        text += ['Kernel problems during the run:', '', *[f'    {p}' for p in problems]]
    with open(os.path.join(args.out, 'profile.md'), 'w') as f:
        f.write('\n'.join(text) + '\n')
    print('\n'.join(text))
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
