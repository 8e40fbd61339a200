# SPDX-License-Identifier: GPL-2.0
"""Self-tests of the runner: it must fail a case on a planted kernel WARN, on a
timeout and under a jiffies clocksource, and count a failing KUnit case."""
from harness import Case, case, run_case


def inner(fn, name, timeout=120, append=()):
    return Case(fn, name, 'single', timeout, list(append), 'inner')


@case(topology='none', group='selftest', timeout=300)
def runner_fails_on_kernel_warn(t):
    def plant(t2):
        t2.vm.run('echo WARNING > /sys/kernel/debug/provoke-crash/DIRECT', check=False)
    r = run_case(inner(plant, 'planted-warn'), t.env, t.outdir)
    t.check(not r.ok, 'a case with a kernel WARN passed')
    t.check(any('WARN' in x for x in r.reasons), f'reasons do not name the WARN: {r.reasons}')


@case(topology='none', group='selftest', timeout=300)
def runner_fails_on_timeout(t):
    def hang(t2):
        t2.vm.run('sleep 600', timeout=900)
    r = run_case(inner(hang, 'planted-timeout', timeout=30), t.env, t.outdir)
    t.check(not r.ok, 'a case that hung passed')
    limit = 30 * t.slow  # case timeouts stretch on the debug kernel
    t.check(any(f'timed out after {limit} s' in x for x in r.reasons), f'reasons: {r.reasons}')
    t.check(r.seconds < limit + 90 * t.slow, f'the timeout took {r.seconds:.0f} s to act')

    def slow_command(t2):
        t2.vm.run('sleep 600', timeout=5)
    r = run_case(inner(slow_command, 'command-timeout'), t.env, t.outdir)
    t.check(not r.ok and any('timed out after 5 s' in x for x in r.reasons),
            f'a command over its own time limit: {r.reasons}')


@case(topology='none', group='selftest', timeout=300)
def runner_refuses_jiffies_clocksource(t):
    def nothing(t2):
        t2.vm.run('true')
    r = run_case(inner(nothing, 'jiffies', append=['clocksource=jiffies']), t.env, t.outdir)
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
