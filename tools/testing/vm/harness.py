# SPDX-License-Identifier: GPL-2.0
"""Test cases for ferry's VM runner: registration, execution, results.

A case is a host-side function decorated with @case. It gets a Test object with
its VMs already booted (one VM with two unconnected NICs, or two VMs whose eth0
share a link) and runs commands in them in any order, waits for conditions,
kills and restarts VMs and checks what it sees. A case fails on an exception, a
failed check, its time limit, or any kernel WARN/BUG/oops/lockdep/sanitizer
report in any console.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import traceback

import ferryvm
from ferryvm import ROOT, VM, Link, VMError, sh

CASES = []


class Case:
    def __init__(self, fn, name, topology, timeout, append, group):
        self.fn = fn
        self.name = name
        self.topology = topology
        self.timeout = timeout
        self.append = append
        self.group = group


# Unloads the echo sample and ferry, in that order (the sample uses ferry).
UNLOAD_ECHO = 'rmmod ferry_echo ferry'


def case(name=None, topology='single', timeout=300, append=(), group='integration'):
    """Registers a test case. topology: 'single' (one VM), 'pair' (two VMs) or
    'none' (the case boots what it needs itself)."""
    def deco(fn):
        CASES.append(Case(fn, name or fn.__name__, topology, timeout, list(append), group))
        return fn
    return deco


class CheckFailed(Exception):
    pass


class Test:
    """What a case sees: its VMs, the built artifacts and check helpers."""

    def __init__(self, env, outdir, vms):
        # How much slower the guest is: cases stretch their waits by it.
        self.slow = 3 if env.get('debug') else 1
        self.env = env
        self.outdir = outdir
        self.vms = vms
        self.failures = []
        self.subresults = []     # (name, ok, detail) counted as separate tests
        self.ferry_ko = env['ferry_ko']
        self.ferryctl = env['ferryctl']
        self.nlraw = f'/usr/bin/python3 {ROOT}/tools/testing/vm/nlraw.py'

    @property
    def vm(self):
        return self.vms[0]

    @property
    def a(self):
        return self.vms[0]

    @property
    def b(self):
        return self.vms[1]

    def check(self, cond, msg):
        if not cond:
            self.failures.append(msg)
        return bool(cond)

    def eq(self, got, want, what):
        return self.check(got == want, f'{what}: got {got!r}, want {want!r}')

    def require(self, cond, msg):
        if not cond:
            raise CheckFailed(msg)

    def log(self, msg):
        print(f'    {msg}', flush=True)

    # --- common guest steps ------------------------------------------------
    # Documentation ranges (RFC 5737, RFC 3849), one per NIC: the links exist
    # only between the test VMs.
    NETS4 = ('192.0.2', '198.51.100', '203.0.113')

    def net_up(self, vm, nic=0, host=1):
        """Brings up eth<nic> with <TEST-NET-(nic+1)>.<host>/24 and
        2001:db8:<nic>::<host>/64."""
        vm.run(f'ip link set eth{nic} up && '
               f'ip addr add {self.NETS4[nic]}.{host}/24 dev eth{nic} && '
               f'ip -6 addr add 2001:db8:{nic}::{host}/64 dev eth{nic} nodad')

    def rxe_add(self, vm, name='rxe0', nic=0):
        vm.run(f'ip link set eth{nic} up && rdma link add {name} type rxe netdev eth{nic}')

    def pair_up(self, echo=False):
        """Two VMs on one link: 192.0.2.1 (a) and .2 (b), each with rxe0 and
        ferry (and, with `echo`, the echo sample); returns (a, b) once b
        reaches a."""
        a, b = self.a, self.b
        self.net_up(a, 0, 1)
        self.net_up(b, 0, 2)
        for vm in (a, b):
            self.rxe_add(vm)
            self.insmod(vm, echo=echo)
        b.wait_for('ping -c1 -W1 192.0.2.1', timeout=30)
        return a, b

    def insmod(self, vm, ko=None, args='', echo=False):
        """Loads ferry.ko (or `ko`); with `echo`, also the Rust sample that
        offers the service "echo" (unload both with UNLOAD_ECHO)."""
        vm.run(f'insmod {sh(ko or self.ferry_ko)} {args}')
        if echo:
            vm.run(f'insmod {sh(self.sample("ferry_echo"))}')

    def sample(self, name):
        """The path of sample module `name`, built beside ferry.ko."""
        return os.path.join(os.path.dirname(self.ferry_ko), f'{name}.ko')

    def ferryctl_json(self, vm, args='device show'):
        r = vm.run(f'{self.ferryctl} -j {args}')
        return json.loads(r.out)

    def until(self, cond, timeout, what):
        """Calls `cond` until it is true; fails the case after `timeout` s."""
        deadline = time.monotonic() + timeout
        while not cond():
            self.require(time.monotonic() < deadline, f'not within {timeout} s: {what}')
            time.sleep(0.5)

    # A leak report's backtrace frame in code that no longer has a symbol: a
    # module that was unloaded (ferry's, in these tests).
    _UNLOADED_FRAME = re.compile(r'^\s+\[<[0-9a-f]+>\] 0x[0-9a-f]+$', re.M)

    def leak_check(self, vm):
        """Debug kernel: scans for leaks at the end of a case and fails it on
        any unreferenced object that ferry allocated (by symbol, or by a frame
        in unloaded module code). Other leaks are counted in the log only."""
        if not vm.running():
            return
        r = vm.run('echo scan > /sys/kernel/debug/kmemleak && sleep 6 && '
                   'echo scan > /sys/kernel/debug/kmemleak && cat /sys/kernel/debug/kmemleak',
                   timeout=180)
        with open(os.path.join(self.outdir, f'kmemleak-{vm.name}.txt'), 'w') as f:
            f.write(r.out)
        entries = r.out.split('unreferenced object')[1:]
        ours = [e for e in entries if 'ferry' in e or self._UNLOADED_FRAME.search(e)]
        self.log(f'{vm.name}: kmemleak: {len(entries)} unreferenced objects, {len(ours)} of ferry')
        self.check(not ours, f'{vm.name}: kmemleak found {len(ours)} leaks of ferry: '
                             + (ours[0].strip().splitlines()[0] if ours else ''))

    def kunit_results(self, vm, prefix):
        """Parses the KTAP results of the KUnit suites whose names start with
        `prefix` with the kernel's own parser, as (suite.case, ok) pairs."""
        r = vm.run(f'for d in /sys/kernel/debug/kunit/{prefix}*/; do cat "$d/results"; done')
        suites = r.out.count('# Subtest:')
        ktap = f'KTAP version 1\n1..{suites}\n' + r.out
        path = os.path.join(self.outdir, f'{prefix}ktap.txt')
        with open(path, 'w') as f:
            f.write(ktap)
        return parse_ktap(self.env['ksrc'], path)


def parse_ktap(ksrc, path):
    kunit = os.path.join(ksrc, 'tools', 'testing', 'kunit', 'kunit.py')
    out = subprocess.run([sys.executable, kunit, 'parse', '--json', path],
                         capture_output=True, text=True)
    text = out.stdout
    start = text.find('{')
    if start < 0:
        raise VMError(f'kunit.py parse gave no JSON: {out.stdout[-500:]} {out.stderr[-500:]}')
    doc = json.JSONDecoder().raw_decode(text[start:])[0]
    results = []

    def walk(group, prefix):
        for tc in group.get('test_cases', []):
            results.append((f'{prefix}{tc["name"]}', tc['status'] == 'PASS', tc['status']))
        for g in group.get('sub_groups', []):
            walk(g, f'{g["name"]}.')
    walk(doc, '')
    return results


class Result:
    def __init__(self, name, ok, reasons, seconds, subresults):
        self.name = name
        self.ok = ok
        self.reasons = reasons
        self.seconds = seconds
        self.subresults = subresults

    def as_dict(self):
        return {'name': self.name, 'ok': self.ok, 'reasons': self.reasons,
                'seconds': round(self.seconds, 1),
                'subresults': [{'name': n, 'ok': o, 'detail': d} for n, o, d in self.subresults]}


def run_case(c, env, outroot):
    outdir = os.path.join(outroot, c.name)
    shutil.rmtree(outdir, ignore_errors=True)
    os.makedirs(outdir)
    start = time.monotonic()
    vms = []
    if c.topology == 'pair':
        link = Link()
        vms = [VM('a', env['kernel'], outdir, nics=[(link, 0), None], append=c.append, mac_base=0x10),
               VM('b', env['kernel'], outdir, nics=[(link, 1), None], append=c.append, mac_base=0x20)]
    elif c.topology == 'single':
        vms = [VM('vm', env['kernel'], outdir, nics=[None, None], append=c.append)]
    t = Test(env, outdir, vms)
    reasons = []
    timed_out = threading.Event()

    def expire():
        timed_out.set()
        for vm in vms:
            vm.kill()
    # KASAN and lockdep make the debug kernel several times slower under TCG
    # (two of its VMs on two cores take minutes to boot).
    timeout = c.timeout * (3 if env.get('debug') else 1)
    for vm in vms:
        vm.boot_timeout = 600 if env.get('debug') else vm.boot_timeout
    watchdog = threading.Timer(timeout, expire)
    watchdog.start()
    try:
        boot_errors = []

        def boot(vm):
            try:
                vm.start()
            except Exception as e:   # reported below
                boot_errors.append(str(e))
        threads = [threading.Thread(target=boot, args=(vm,)) for vm in vms]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        if boot_errors:
            raise VMError('; '.join(boot_errors))
        c.fn(t)
        if env.get('debug'):
            for vm in vms:
                t.leak_check(vm)
    except Exception as e:
        if timed_out.is_set():
            reasons.append(f'timed out after {timeout} s')
        elif isinstance(e, (VMError, CheckFailed)):
            reasons.append(str(e))
        else:
            reasons.append(''.join(traceback.format_exception(e)).strip())
    finally:
        watchdog.cancel()
        for vm in vms:
            vm.stop()
    if timed_out.is_set() and not any('timed out' in r for r in reasons):
        reasons.append(f'timed out after {timeout} s')
    reasons += t.failures
    for vm in vms:
        if os.path.exists(vm.console_path):
            reasons += vm.kernel_problems()
    ok = not reasons and all(o for _, o, _ in t.subresults)
    return Result(c.name, ok, reasons, time.monotonic() - start, t.subresults)
