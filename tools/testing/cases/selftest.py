# SPDX-License-Identifier: GPL-2.0
"""Self-tests of the runner. A case fails on a planted kernel WARN, a hung
task, its own time limit or a command's, and under a jiffies clocksource; a
failing KUnit case is counted. With VMs reused between cases, each case is
judged on its own console alone, what a case leaves behind is undone before
the next one, and a case that fails, hangs or taints the kernel leaves the
next one a freshly booted VM."""
import os

from harness import Case, Pool, case, run_case


def inner(fn, name, timeout=120, append=()):
    return Case(fn, name, 'single', timeout, list(append), 'inner')


def sequence(t, *cases):
    """Runs inner cases one after another on VMs they share, as the runner
    does (reuse on, whatever FERRY_BOOT_PER_CASE says: it is what is tested)."""
    pool = Pool(t.env, os.path.join(t.outdir, 'vms'), reuse=True)
    try:
        results = [run_case(c, t.env, t.outdir, pool) for c in cases]
    finally:
        pool.discard()
    t.boots += sum(r.boots for r in results)
    for r in results:
        t.log(f'{r.name}: ok={r.ok} boots={r.boots} {r.reasons}')
    return results


def nothing(t2):
    t2.vm.run('true')


@case(topology='none', group='selftest', timeout=400)
def runner_judges_each_case_alone(t):
    """A WARN fails the case it happens in, not the next one, which gets a
    fresh VM; cases that pass share their VM."""
    def plant(t2):
        t2.vm.run('echo WARNING > /sys/kernel/debug/provoke-crash/DIRECT', check=False)
    first, warn, after, last = sequence(t, inner(nothing, 'first'), inner(plant, 'planted-warn'),
                                        inner(nothing, 'after-warn'), inner(nothing, 'last'))
    t.check(first.ok and first.boots == 1, f'the first case booted a VM and passed: {first.reasons}')
    t.check(warn.boots == 0, 'the second case reused the first one\'s VM')
    t.check(not warn.ok, 'a case with a kernel WARN passed')
    t.check(any('WARN' in x for x in warn.reasons), f'reasons do not name the WARN: {warn.reasons}')
    t.check(after.ok, f'the case after the WARN failed too: {after.reasons}')
    t.eq(after.boots, 1, 'boots of the case after a failed one')
    t.check(last.ok and last.boots == 0, 'the case after that reused its VM')


@case(topology='none', group='selftest', timeout=400)
def runner_fails_on_timeout(t):
    """A case over its time limit is killed, and the next one runs on a fresh
    VM; a command over its own limit fails its case."""
    def hang(t2):
        t2.vm.run('sleep 600', timeout=900)
    hung, after = sequence(t, inner(hang, 'planted-timeout', timeout=30), inner(nothing, 'after-timeout'))
    t.check(not hung.ok, 'a case that hung passed')
    limit = 30 * t.slow  # case timeouts stretch on the debug kernel
    t.check(any(f'timed out after {limit} s' in x for x in hung.reasons), f'reasons: {hung.reasons}')
    t.check(hung.seconds < limit + 90 * t.slow, f'the timeout took {hung.seconds:.0f} s to act')
    t.check(after.ok, f'the case after a timeout failed: {after.reasons}')
    t.eq(after.boots, 1, 'boots of the case after a timeout')

    def slow_command(t2):
        t2.vm.run('sleep 600', timeout=5)
    r, = sequence(t, inner(slow_command, 'command-timeout'))
    t.check(not r.ok and any('timed out after 5 s' in x for x in r.reasons),
            f'a command over its own time limit: {r.reasons}')


@case(topology='none', group='selftest', timeout=400)
def runner_restores_guest_state(t):
    """What a passing case leaves (ferry loaded, an RDMA link, addresses, a
    network namespace, a dirty RAM disk, a mount, a straggler process, a file
    in /tmp, a sysctl) is undone before the next case, which sees none of it
    on the same VM."""
    def dirty(t2):
        vm = t2.vm
        t2.net_up(vm, 0, 1)
        t2.rxe_add(vm)
        t2.insmod(vm)
        vm.run('ip netns add leftover && mkdir -p /tmp/mnt && mount -t tmpfs none /tmp/mnt && '
               'dd if=/dev/urandom of=/dev/ram0 bs=64k count=16 oflag=direct status=none && '
               'echo 17 > /proc/sys/kernel/hung_task_timeout_secs && '
               '(setsid sleep 1000 </dev/null >/dev/null 2>&1 &)')

    def clean(t2):
        vm = t2.vm
        t2.eq(vm.run('grep -c "^ferry " /proc/modules', check=False).out.strip(), '0', 'ferry loaded')
        t2.eq(vm.run('rdma link show').out.strip(), '', 'RDMA links')
        t2.eq(vm.run('ip netns list').out.strip(), '', 'network namespaces')
        t2.eq(vm.run('ip -4 addr show dev eth0').out.strip(), '', 'eth0 addresses')
        t2.eq(vm.run('cat /sys/kernel/debug/ramdisk_pages/ram0').out.strip(), '0', 'ram0 pages')
        t2.check(vm.run('cmp -n 1048576 /dev/ram0 /dev/zero', check=False).rc == 0, 'ram0 reads zeros')
        t2.eq(vm.run('grep -c " /tmp/mnt " /proc/mounts', check=False).out.strip(), '0', 'mounts')
        t2.eq(vm.run('pgrep -c -x sleep', check=False).out.strip(), '0', 'straggler processes')
        t2.eq(vm.run('ls /tmp/mnt 2>&1', check=False).rc, 2, '/tmp/mnt')
        t2.eq(vm.run('cat /proc/sys/kernel/hung_task_timeout_secs').out.strip(), '30', 'sysctl')
    left, after = sequence(t, inner(dirty, 'leaves-state'), inner(clean, 'finds-none'))
    t.check(left.ok, f'the case that left state failed: {left.reasons}')
    for want in ('unloaded ferry', 'deleted RDMA link rxe0', 'deleted netns leftover',
                 'unmounted /tmp/mnt', 'zeroed ram0', 'killed', 'reset interface eth0',
                 'sysctl kernel/hung_task_timeout_secs'):
        t.check(any(x.startswith(want) for x in left.resets),
                f'the reset did not report "{want}": {left.resets}')
    t.check(after.ok, f'the next case found state left over: {after.reasons}')
    t.eq(after.boots, 0, 'boots of the next case (the VM was reused)')


@case(topology='none', group='selftest', timeout=400)
def runner_catches_hung_task(t):
    """A task stuck in D state is reported by the kernel's hung-task check and
    fails the case; the stuck VM is not reused."""
    def stuck(t2):
        vm = t2.vm
        vm.run('echo 5 > /proc/sys/kernel/hung_task_timeout_secs && '
               '(setsid sh -c "echo HUNG_TASK > /sys/kernel/debug/provoke-crash/DIRECT" '
               '</dev/null >/dev/null 2>&1 &)')
        vm.wait_for('dmesg | grep -q "blocked for more than"', timeout=60 * t2.slow, interval=2)
    hung, after = sequence(t, inner(stuck, 'hung-task'), inner(nothing, 'after-hung-task'))
    t.check(not hung.ok, 'a case with a hung task passed')
    t.check(any('blocked for more than' in x for x in hung.reasons), f'reasons: {hung.reasons}')
    t.check(after.ok, f'the case after a hung task failed: {after.reasons}')
    t.eq(after.boots, 1, 'boots of the case after a hung task')


@case(topology='none', group='selftest', timeout=400)
def runner_fresh_vm_after_taint(t):
    """A case that taints the kernel with a flag other than O, E or N passes
    but leaves the next case a fresh VM; N alone (KUnit) does not."""
    def taint_n(t2):
        t2.vm.run('echo 262144 > /proc/sys/kernel/tainted')
    def taint_u(t2):
        t2.vm.run('echo 64 > /proc/sys/kernel/tainted')
    n, u, after = sequence(t, inner(taint_n, 'taint-N'), inner(taint_u, 'taint-U'),
                           inner(nothing, 'after-taint'))
    t.check(n.ok and u.ok, f'tainting cases: {n.reasons} {u.reasons}')
    t.eq(u.boots, 0, 'boots of the case after taint N')
    t.eq(after.boots, 1, 'boots of the case after taint U')


@case(topology='none', group='selftest', timeout=300)
def runner_refuses_jiffies_clocksource(t):
    r, = sequence(t, inner(nothing, 'jiffies', append=['clocksource=jiffies']))
    t.check(not r.ok, 'a VM on the jiffies clocksource was accepted')
    t.check(any('clocksource is jiffies' in x for x in r.reasons), f'reasons: {r.reasons}')


@case(group='selftest', timeout=240)
def kunit_failure_is_counted(t):
    vm = t.vm
    t.insmod(vm, t.env['selftest_ko'])
    results = t.kunit_results(vm, 'ferry_selftest_kunit')
    got = sorted((name, ok) for name, ok, _ in results)
    t.eq(got, [('ferry_selftest_kunit.fails_on_purpose', False),
               ('ferry_selftest_kunit.passes', True)], 'parsed KUnit results')
    vm.run('rmmod ferry_kunit_selftest')
