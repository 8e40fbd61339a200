# SPDX-License-Identifier: GPL-2.0
"""Test cases for ferry's VM runner: registration, execution, results.

A case is a host-side function decorated with @case. It gets a Test object with
its VMs already booted (one VM with two unconnected NICs, or two VMs whose eth0
share a link) and runs commands in them in any order, waits for conditions,
kills and restarts VMs and checks what it sees. A case fails on an exception, a
failed check, its time limit, what it leaves behind that a reset cannot undo,
or any kernel WARN/BUG/oops/lockdep/sanitizer/hung-task report in its own part
of any console (VMs are reused between cases: see Pool).
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


def slowness(env):
    """How many times slower than the normal kernel the guest runs: KASAN
    and lockdep make the debug kernel about 3 times slower under TCG. Case
    timeouts, the waits of cases and guest commands stretch by it."""
    return 3 if env.get('debug') else 1


class Case:
    def __init__(self, fn, name, topology, timeout, append, group, fresh=False):
        self.fn = fn
        self.fresh = fresh
        self.name = name
        self.topology = topology
        self.timeout = timeout
        self.append = append
        self.group = group


# Unloads the echo sample and ferry, in that order (the sample uses ferry).
UNLOAD_ECHO = 'rmmod ferry_echo ferry'


def case(name=None, topology='single', timeout=300, append=(), group='integration', fresh=False):
    """Registers a test case. topology: 'single' (one VM), 'pair' (two VMs) or
    'none' (the case boots what it needs itself). Consecutive cases of one
    topology and kernel command line (`append`) share their VMs; `fresh`
    asks for VMs of its own."""
    def deco(fn):
        CASES.append(Case(fn, name or fn.__name__, topology, timeout, list(append), group, fresh))
        return fn
    return deco


class CheckFailed(Exception):
    pass


class Test:
    """What a case sees: its VMs, the built artifacts and check helpers."""

    def __init__(self, env, outdir, vms):
        # How much slower the guest is: cases stretch their waits by it.
        self.slow = slowness(env)
        self.env = env
        self.outdir = outdir
        self.vms = vms
        self.failures = []
        self.subresults = []     # (name, ok, detail) counted as separate tests
        self.resets = []         # what resetting its VMs undid after the case
        self.boots = 0           # boots of VMs a 'none' case started itself
        self.boot_seconds = 0.0  # and the seconds they took
        self.prefix = ''         # names the case in its log lines when cases run side by side
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
        print(f'    {self.prefix}{msg}', flush=True)

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
    # A frame in code of a module gone by the scan (ferry's, unloaded at the
    # end of a case): the kernel prints it as a bare address, with or without
    # the bracketed one before it.
    _UNLOADED_FRAME = re.compile(r'^\s+(\[<[0-9a-f]+>\] )?0x[0-9a-f]+$', re.M)

    def leak_check(self, vm):
        """Debug kernel: scans for leaks at the end of a case and fails it on
        any unreferenced object that ferry allocated (by symbol, or by a frame
        in unloaded module code). Other leaks are counted in the log only."""
        if not vm.running():
            return
        # kmemleak reports an unreferenced object on its second scan (the
        # first records its checksum), once it is 5 s old: the second scan
        # starts 6 s after this check began at least, so whatever the case
        # allocated is old enough (on the debug kernel a scan alone takes
        # longer).
        began = time.monotonic()
        vm.run('echo scan > /sys/kernel/debug/kmemleak', timeout=180)
        time.sleep(max(0.0, 6 - (time.monotonic() - began)))
        r = vm.run('echo scan > /sys/kernel/debug/kmemleak && cat /sys/kernel/debug/kmemleak && '
                   # What is reported now is this case's: the next case on
                   # this VM starts from a clean list.
                   'echo clear > /sys/kernel/debug/kmemleak', timeout=180)
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
    def __init__(self, name, ok, reasons, seconds, subresults, boots=0, boot_seconds=0.0):
        self.name = name
        self.boots = boots
        self.boot_seconds = boot_seconds
        self.ok = ok
        self.reasons = reasons
        self.seconds = seconds
        self.subresults = subresults

    def as_dict(self):
        return {'name': self.name, 'ok': self.ok, 'reasons': self.reasons,
                'seconds': round(self.seconds, 1), 'boots': self.boots,
                'boot_seconds': round(self.boot_seconds, 1),
                'subresults': [{'name': n, 'ok': o, 'detail': d} for n, o, d in self.subresults]}


# Taint flags a case may add and still leave its VM to the next case:
# O (out-of-tree module), E (unsigned module), N (KUnit ran).
TAINT_ALLOWED = (1 << 12) | (1 << 13) | (1 << 18)
TAINT_LETTERS = 'PFSRMBUDAWCIOELKXTNJ'


def taint_letters(mask):
    return ''.join(ch for bit, ch in enumerate(TAINT_LETTERS) if mask & (1 << bit)) or '-'


def boot_per_case():
    """FERRY_BOOT_PER_CASE=1: every case boots its own VMs (no reuse), for
    comparison and for bisecting a flaky case."""
    return os.environ.get('FERRY_BOOT_PER_CASE', '0') not in ('', '0')


class Pool:
    """Booted VMs kept for the next case of the same kind: the same topology
    and kernel command line. A case that fails, times out, leaves something
    a reset cannot undo, adds a taint flag other than O, E or N, or turns
    lockdep off gives its VMs up, and the next case boots fresh ones; so does
    every case when reuse is off."""

    def __init__(self, env, vmdir, reuse=True):
        self.env = env
        self.vmdir = vmdir
        self.reuse = reuse
        self.key = None
        self.vms = []
        self.serial = 0

    def take(self, c):
        """The VMs for case `c`, not yet started when they are new."""
        key = (c.topology, tuple(c.append))
        if self.vms and (not self.reuse or c.fresh or key != self.key
                         or not all(vm.running() for vm in self.vms)):
            self.discard()
        if not self.vms and c.topology != 'none':
            self.serial += 1
            d = os.path.join(self.vmdir, f'{self.serial}-{c.topology}')
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
            kernel = self.env['kernel']
            if c.topology == 'pair':
                link = Link()
                self.vms = [VM('a', kernel, d, nics=[(link, 0), None], append=c.append, mac_base=0x10),
                            VM('b', kernel, d, nics=[(link, 1), None], append=c.append, mac_base=0x20)]
            else:
                self.vms = [VM('vm', kernel, d, nics=[None, None], append=c.append)]
            for vm in self.vms:
                if self.env.get('debug'):
                    vm.boot_timeout = 600
                    # Four-level paging, as on a CPU without LA57: with five
                    # (TCG offers LA57), an interrupt while the boot CPU's
                    # features are cleared and read again meets a direct-map
                    # address KASAN calls wild, a known upstream false
                    # positive (see Documentation/testing.md).
                    vm.append.append('no5lvl')
                vm.slow = slowness(self.env)
            self.key = key
        return list(self.vms)

    def discard(self):
        for vm in self.vms:
            vm.stop()
        self.vms = []


def _parallel(fn, vms):
    """Runs fn(vm) for each VM at once; returns the errors, as text."""
    errors = []

    def one(vm):
        try:
            fn(vm)
        except Exception as e:   # reported by the caller
            errors.append(f'{e}')
    threads = [threading.Thread(target=one, args=(vm,)) for vm in vms]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return errors


def _reset(t, vm, reasons):
    """Brings a VM back to its state after boot once its case passed; says
    whether it may serve the next case."""
    done, left, taint, debug_locks = vm.reset(timeout=120 * t.slow)
    t.resets += done
    if done:
        t.log(f'{vm.name}: reset: ' + '; '.join(done))
    if left:
        reasons.append(f'{vm.name}: the case left what the runner could not undo: ' + '; '.join(left))
        return False
    added = taint & ~vm.base_taint & ~TAINT_ALLOWED
    if added:
        t.log(f'{vm.name}: taint {taint_letters(added)} added: a fresh VM for the next case')
        return False
    if vm.base_debug_locks == 1 and debug_locks == 0:
        reasons.append(f'{vm.name}: lockdep turned itself off (debug_locks 0)')
        return False
    return True


def run_case(c, env, outroot, pool=None):
    """Runs one case on the pool's VMs (or, without a pool, on VMs of its own
    that it stops afterwards) and judges it on its own console."""
    outdir = os.path.join(outroot, c.name)
    shutil.rmtree(outdir, ignore_errors=True)
    os.makedirs(outdir)
    own_pool = pool is None
    if own_pool:
        pool = Pool(env, os.path.join(outdir, 'vms'), reuse=False)
    start = time.monotonic()
    vms = pool.take(c)
    boots_before = sum(vm.boots for vm in vms)
    t = Test(env, outdir, vms)
    if env.get('jobs', 1) > 1:
        t.prefix = f'[{c.name}] '
    reasons = []
    timed_out = threading.Event()

    def expire():
        timed_out.set()
        for vm in vms:
            vm.kill()
    # (Two of the debug kernel's VMs on two cores take minutes to boot.)
    timeout = c.timeout * slowness(env)
    watchdog = threading.Timer(timeout, expire)
    watchdog.start()
    reusable = False
    # Boot time: the wall time of the boot before the case (a pair boots at
    # once), then each VM start in the case itself.
    first_boot = 0.0
    booted = sum(vm.boot_seconds for vm in vms)
    try:
        fresh = not all(vm.running() for vm in vms)
        began = time.monotonic()
        boot_errors = _parallel(lambda vm: vm.running() or vm.start(), vms)
        first_boot = time.monotonic() - began if fresh else 0.0
        booted = sum(vm.boot_seconds for vm in vms)
        if boot_errors:
            raise VMError('; '.join(boot_errors))
        c.fn(t)
        # Without reuse the VMs go now, as they are: nothing to reset.
        if pool.reuse:
            kept = {}
            began = time.monotonic()
            errors = _parallel(lambda vm: kept.__setitem__(
                vm.name, vm.running() and _reset(t, vm, reasons)), vms)
            if errors:
                raise VMError('reset: ' + '; '.join(errors))
            reusable = all(kept.values())
            t.log(f'reset took {time.monotonic() - began:.1f} s')
        if env.get('debug'):
            began = time.monotonic()
            for vm in vms:
                t.leak_check(vm)
            t.log(f'leak check took {time.monotonic() - began:.1f} s')
        watchdog.cancel()
    except Exception as e:
        reusable = False
        if timed_out.is_set():
            reasons.append(f'timed out after {timeout} s')
        elif isinstance(e, (VMError, CheckFailed)):
            reasons.append(str(e))
        else:
            reasons.append(''.join(traceback.format_exception(e)).strip())
    finally:
        watchdog.cancel()
    if timed_out.is_set() and not any('timed out' in r for r in reasons):
        reasons.append(f'timed out after {timeout} s')
    reasons += t.failures
    if not reusable:
        # Stopped first, so that their consoles are complete.
        pool.discard()
    for vm in vms:
        text, marked = vm.end_case(c.name) if reusable else (vm.rest_of_console(), False)
        if reusable and not marked:
            t.log(f'{vm.name}: the end-of-case mark did not reach the console: a fresh VM next')
            reusable = False
        with open(os.path.join(outdir, f'{vm.name}.console'), 'w') as f:
            f.write(text)
        reasons += vm.kernel_problems(text)
    ok = not reasons and all(o for _, o, _ in t.subresults)
    if not ok or not reusable or own_pool:
        pool.discard()
    boots = sum(vm.boots for vm in vms) - boots_before + t.boots
    boot_seconds = first_boot + sum(vm.boot_seconds for vm in vms) - booted + t.boot_seconds
    r = Result(c.name, ok, reasons, time.monotonic() - start, t.subresults, boots, boot_seconds)
    r.resets = t.resets
    return r
