# SPDX-License-Identifier: GPL-2.0
"""Self-tests of the runner. A case fails on a planted kernel WARN, a hung
task, its own time limit or a command's, a KUnit suite of ferry's that failed
at a load, and under a jiffies clocksource; a failing KUnit case is counted. With VMs reused between cases, each case is
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
    t.boot_seconds += sum(r.boot_seconds for r in results)
    for r in results:
        t.log(f'{r.name}: ok={r.ok} boots={r.boots} {r.seconds:.0f} s {r.reasons}')
    return results


def nothing(t2):
    t2.vm.run('true')


def plant_warn(t2):
    t2.vm.run('echo WARNING > /sys/kernel/debug/provoke-crash/DIRECT', check=False)


def plant_bug_message(t2):
    # Reports in the console alone (no taint, nothing left behind): a BUG,
    # the three ways the kernel says it ran out of memory, and a KUnit suite
    # of ferry's that failed at a load.
    for line in ('BUG: planted by the runner self-test',
                 'not ok 9 ferry_planted',
                 'planted: page allocation failure: order:4, mode:0x40cc0',
                 'planted invoked oom-killer: gfp_mask=0xcc0, order=0',
                 'Out of memory: Killed process 1 (planted)'):
        t2.vm.run(f'echo "{line}" > /dev/kmsg')


def mark_own_console(t2):
    t2.vm.run('echo "ferry-selftest: this line belongs to mark-console" > /dev/kmsg')


def taint_n(t2):
    t2.vm.run('echo 262144 > /proc/sys/kernel/tainted')


def taint_u(t2):
    t2.vm.run('echo 64 > /proc/sys/kernel/tainted')


def leave_state(t2):
    vm = t2.vm
    t2.net_up(vm, 0, 1)
    t2.rxe_add(vm)
    t2.insmod(vm)
    vm.run('ip netns add leftover && mkdir -p /tmp/mnt && mount -t tmpfs none /tmp/mnt && '
           'dd if=/dev/urandom of=/dev/ram0 bs=64k count=16 oflag=direct status=none && '
           'echo 17 > /proc/sys/kernel/hung_task_timeout_secs && echo left > /tmp/leftover && '
           'dmesg -n 1 && (setsid sleep 1000 </dev/null >/dev/null 2>&1 &)')


def find_none(t2):
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
    t2.eq(vm.run('cat /proc/sys/kernel/printk').out.split()[0], '7', 'console log level')
    t2.eq(vm.run('ls /tmp/leftover 2>&1', check=False).rc, 2, 'a file left in /tmp')
    t2.eq(vm.run('dmesg | grep -c "ferry: rxe0: added"', check=False).out.strip(), '0',
          'the last case\'s kernel messages in dmesg')


def hang_a_task(t2):
    vm = t2.vm
    vm.run('echo 5 > /proc/sys/kernel/hung_task_timeout_secs && '
           '(setsid sh -c "echo HUNG_TASK > /sys/kernel/debug/provoke-crash/DIRECT" '
           '</dev/null >/dev/null 2>&1 &)')
    vm.wait_for('dmesg | grep -q "blocked for more than"', timeout=60 * t2.slow, interval=2)


def hang(t2):
    t2.vm.run('sleep 600', timeout=900)


def slow_command(t2):
    t2.vm.run('sleep 600', timeout=5)


@case(topology='none', group='selftest', timeout=900)
def runner_reuses_vms(t):
    """One chain of cases on shared VMs, each rule of reuse a result of its own:
    cases that pass share their VM; a WARN fails its case and not the next,
    which gets a fresh VM; a taint other than O, E or N passes but gives the
    next case a fresh VM, N alone does not; what a passing case leaves (ferry
    loaded, an RDMA link, addresses, a network namespace, a dirty RAM disk, a
    mount, a straggler process, a file in /tmp, a sysctl, kernel messages) is
    undone and the next case, on the same VM, finds none of it; a task stuck
    in D state is reported by the kernel's hung-task check and fails its case,
    and the next gets a fresh VM; so does the case after one over its time
    limit; a command over its own limit fails its case. A kernel report in a
    case's console alone fails it and gives the next case a fresh VM; a line
    a case logs is in its own console and not in the next case's."""
    r = dict((x.name, x) for x in sequence(
        t, inner(nothing, 'first'), inner(plant_warn, 'planted-warn'),
        inner(nothing, 'after-warn'), inner(plant_bug_message, 'planted-report'),
        inner(mark_own_console, 'mark-console'), inner(nothing, 'after-mark'),
        inner(taint_n, 'taint-N'), inner(taint_u, 'taint-U'),
        inner(nothing, 'after-taint'), inner(leave_state, 'leaves-state'),
        inner(find_none, 'finds-none'), inner(hang_a_task, 'hung-task'),
        inner(nothing, 'after-hung-task'), inner(hang, 'planted-timeout', timeout=10),
        inner(nothing, 'after-timeout'), inner(slow_command, 'command-timeout')))

    def rule(name, ok, detail):
        t.subresults.append((name, bool(ok), detail))

    def ran(name, ok, boots):
        x = r[name]
        return x.ok == ok and x.boots == boots

    rule('passing_cases_share_a_vm', ran('first', True, 1) and r['planted-warn'].boots == 0,
         f'first: {r["first"].reasons}, boots {r["first"].boots}; the next booted '
         f'{r["planted-warn"].boots}')
    rule('warn_fails_its_case', not r['planted-warn'].ok
         and any('WARN' in x for x in r['planted-warn'].reasons), r['planted-warn'].reasons)
    rule('case_after_a_warn_passes_on_a_fresh_vm', ran('after-warn', True, 1),
         f'{r["after-warn"].reasons}, boots {r["after-warn"].boots}')
    rule('report_alone_fails_its_case_and_the_vm_goes', not r['planted-report'].ok
         and r['planted-report'].boots == 0 and r['mark-console'].boots == 1,
         f'{r["planted-report"].reasons}; the next case booted {r["mark-console"].boots}')
    oom = [x for x in r['planted-report'].reasons if 'out of memory' in x]
    rule('out_of_memory_fails_its_case', len(oom) == 3, r['planted-report'].reasons)
    rule('failed_kunit_suite_fails_its_case',
         any('failed KUnit suite' in x for x in r['planted-report'].reasons),
         r['planted-report'].reasons)

    def console(name):
        with open(os.path.join(t.outdir, name, 'vm.console')) as f:
            return f.read()
    line = 'this line belongs to mark-console'
    rule('each_case_has_its_own_console', ran('mark-console', True, 1) and ran('after-mark', True, 0)
         and line in console('mark-console') and line not in console('after-mark'),
         'the marked line is in mark-console\'s console and not in the next case\'s')
    rule('taint_n_keeps_the_vm', ran('taint-N', True, 0) and ran('taint-U', True, 0),
         f'taint-N {r["taint-N"].reasons}, taint-U {r["taint-U"].reasons} boots {r["taint-U"].boots}')
    rule('taint_u_gives_a_fresh_vm', ran('after-taint', True, 1), f'boots {r["after-taint"].boots}')
    missing = [w for w in ('unloaded ferry', 'deleted RDMA link rxe0', 'deleted netns leftover',
                           'unmounted /tmp/mnt', 'zeroed ram0', 'killed', 'reset interface eth0',
                           'sysctl kernel/hung_task_timeout_secs', 'sysctl kernel/printk',
                           'removed from /tmp')
               if not any(x.startswith(w) for x in r['leaves-state'].resets)]
    failed = [x for x in r['leaves-state'].resets if ': failed' in x]
    rule('reset_undoes_what_a_case_left', r['leaves-state'].ok and not missing and not failed,
         f'{r["leaves-state"].reasons}; not reported: {missing}; reset: {r["leaves-state"].resets}')
    rule('next_case_finds_nothing_left', ran('finds-none', True, 0),
         f'{r["finds-none"].reasons}, boots {r["finds-none"].boots}')
    rule('hung_task_fails_its_case', not r['hung-task'].ok
         and any('blocked for more than' in x for x in r['hung-task'].reasons), r['hung-task'].reasons)
    rule('case_after_a_hung_task_gets_a_fresh_vm', ran('after-hung-task', True, 1),
         f'{r["after-hung-task"].reasons}, boots {r["after-hung-task"].boots}')
    limit = 10 * t.slow  # case timeouts stretch on the debug kernel
    x = r['planted-timeout']
    rule('timeout_fails_its_case', not x.ok and x.seconds < limit + 90 * t.slow
         and any(f'timed out after {limit} s' in y for y in x.reasons),
         f'{x.reasons} after {x.seconds:.0f} s')
    rule('case_after_a_timeout_gets_a_fresh_vm', ran('after-timeout', True, 1),
         f'{r["after-timeout"].reasons}, boots {r["after-timeout"].boots}')
    x = r['command-timeout']
    rule('command_timeout_fails_its_case',
         not x.ok and any('timed out after 5 s' in y for y in x.reasons), x.reasons)


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
