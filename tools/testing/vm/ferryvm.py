# SPDX-License-Identifier: GPL-2.0
"""Host side of ferry's VM runner.

Boots the test kernel under QEMU (TCG) with virtme-ng, which shares the host's
root filesystem into the guest over 9p, so host binaries (rdma, ferryctl, fio,
perftest, the test scripts) run in the guest as they are. Each VM gets:

- a guest agent on a virtio-serial port (agent.py): the host runs commands in
  the guest through VM.run() and gets their exit status and output;
- its console streamed to <outdir>/<name>.console;
- its NICs as QEMU UDP socket netdevs on 127.0.0.1, so two VMs share one
  Ethernet segment and either side can be killed and booted again (the
  sockets get large buffers: see qemu-noudev).

Every QEMU this module starts runs in its own session; kill() signals that
session only, never another process.
"""
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
AGENT = os.path.join(ROOT, 'tools', 'testing', 'vm', 'agent.py')
# QEMU as vng starts it, but a guest without udev (see qemu-noudev).
QEMU = os.path.join(ROOT, 'tools', 'testing', 'vm', 'qemu-noudev')

# Kernel reports that fail a test case wherever they appear in a console. Lines
# from the kernel carry a printk timestamp, which keeps guest program output out.
_KMSG = r'^\[\s*\d+\.\d+\]\s'
BAD_PATTERNS = [
    (re.compile(_KMSG + r'.*------------\[ cut here \]------------'), 'kernel WARN/BUG'),
    (re.compile(_KMSG + r'WARNING:'), 'kernel WARNING'),
    (re.compile(_KMSG + r'.*\bBUG:'), 'kernel BUG'),
    (re.compile(_KMSG + r'.*kernel BUG at'), 'kernel BUG'),
    (re.compile(_KMSG + r'.*\bOops\b'), 'kernel oops'),
    (re.compile(_KMSG + r'.*general protection fault'), 'general protection fault'),
    (re.compile(_KMSG + r'.*Kernel panic'), 'kernel panic'),
    (re.compile(_KMSG + r'.*(possible circular locking|possible recursive locking|'
                r'inconsistent lock state|possible irq lock inversion|'
                r'suspicious RCU usage|BUG: lock held|DEBUG_LOCKS_WARN_ON)'), 'lockdep report'),
    (re.compile(_KMSG + r'.*\b(KASAN|UBSAN|KFENCE):'), 'sanitizer report'),
    (re.compile(_KMSG + r'.*(soft lockup|hard LOCKUP|rcu_\w+ detected stalls|'
                r'blocked for more than)'), 'lockup or stall'),
    (re.compile(_KMSG + r'.*(page allocation failure|Out of memory|invoked oom-killer|'
                r'oom-kill:)'), 'out of memory'),
    # A test build runs its KUnit suites at every load, in any case: a suite
    # of ferry's or ferry_blk's that fails there fails the case (the runner's
    # own self-test module fails one on purpose).
    (re.compile(_KMSG + r'not ok \d+ ferry_(?!selftest_kunit\b)'), 'failed KUnit suite'),
]

JIFFIES_CLOCKSOURCES = ('jiffies', 'refined-jiffies')


class VMError(Exception):
    """A VM failed to boot, answer or behave."""


def free_udp_port():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


class Link:
    """One Ethernet segment between two VMs: a pair of UDP ports on 127.0.0.1."""

    def __init__(self):
        self.ports = (free_udp_port(), free_udp_port())

    def netdev(self, side, ident):
        local, remote = self.ports[side], self.ports[1 - side]
        return (f'socket,id={ident},udp=127.0.0.1:{remote},'
                f'localaddr=127.0.0.1:{local}')


class Result:
    def __init__(self, cmd, rep):
        self.cmd = cmd
        self.rc = rep.get('rc')
        self.out = rep.get('out', '')
        self.err = rep.get('err', '')
        self.timed_out = bool(rep.get('timeout'))

    def __repr__(self):
        return f'<{self.cmd!r}: rc={self.rc} out={self.out[-300:]!r} err={self.err[-300:]!r}>'


class VM:
    """A test VM. `nics` is a list of (Link, side) or None for an unconnected NIC."""

    def __init__(self, name, kernel, outdir, nics=(None,), cpus=2, memory='1G',
                 append=(), boot_timeout=180, mac_base=0x10):
        self.name = name
        # Host files the VM sees as virtio disks vda, vdb, ... (set before
        # start(): a disk that outlives the VM, as a server's own disk).
        self.disks = []
        self.kernel = kernel
        self.outdir = outdir
        self.nics = list(nics)
        self.cpus = cpus
        self.memory = memory
        self.append = list(append)
        self.boot_timeout = boot_timeout
        # How many times slower than the normal kernel this one runs (the
        # debug kernel's): what a command may take by default scales with it.
        self.slow = 1
        self.mac_base = mac_base
        self.proc = None
        self.sock = None
        self.buf = b''
        self.seq = 0
        self.info = {}
        self.boots = 0
        # Seconds spent booting, from QEMU's start to the agent's baseline.
        self.boot_seconds = 0.0
        # One console file per boot: QEMU reopens its output and truncates
        # it, so a VM started again must not write over its earlier boot.
        self.console_path = os.path.join(outdir, f'{name}.console')
        self.console_paths = []
        # Where the console of the case now running begins (see end_case()).
        self.slice_pos = 0
        self.marks = 0
        # The kernel's taint flags and lockdep's state right after boot.
        self.base_taint = 0
        self.base_debug_locks = None

    # --- lifecycle -------------------------------------------------------
    def _qemu_opts(self, sockpath):
        opts = ['-chardev', f'socket,id=ferryctl,path={sockpath},server=on,wait=off',
                '-device', 'virtio-serial-pci,id=ferryser',
                '-device', 'virtserialport,bus=ferryser.0,chardev=ferryctl,name=ferry.ctl']
        for i, nic in enumerate(self.nics):
            ident = f'fnet{i}'
            if nic is None:
                # The NIC's link is up and leads nowhere: its frames go to
                # the discard port, where nobody listens. (A hub with one port
                # instead keeps them, and the guest's transmit watchdog fires
                # every 5 s.)
                opts += ['-netdev', f'socket,id={ident},udp=127.0.0.1:9,'
                                    f'localaddr=127.0.0.1:{free_udp_port()}']
            else:
                link, side = nic
                opts += ['-netdev', link.netdev(side, ident)]
            opts += ['-device', f'virtio-net-pci,netdev={ident},mac={self.mac(i)}']
        for i, path in enumerate(self.disks):
            opts += ['-drive', f'file={path},if=none,format=raw,id=fdisk{i}',
                     '-device', f'virtio-blk-pci,drive=fdisk{i},serial=ferrydisk{i}']
        return opts

    def start(self):
        if self.proc:
            raise VMError(f'{self.name}: already running')
        self.boots += 1
        began = time.monotonic()
        try:
            return self._boot()
        finally:
            self.boot_seconds += time.monotonic() - began

    def _boot(self):
        sockpath = os.path.join(self.outdir, f'{self.name}.ctl')
        if os.path.exists(sockpath):
            os.unlink(sockpath)
        env = dict(os.environ)
        env['PATH'] = os.path.dirname(VNG) + ':' + env.get('PATH', '')
        python = '/usr/bin/python3' if os.path.exists('/usr/bin/python3') else 'python3'
        cmd = [VNG, '--run', self.kernel, '--disable-kvm', '--force-9p', '--verbose',
               '--qemu', QEMU,
               '--cpus', str(self.cpus), '--memory', self.memory,
               '--append', ' '.join(['net.ifnames=0', 'panic=-1', 'oops=panic'] + self.append),
               '--exec', f'{python} {AGENT}',
               '--qemu-opts=' + ' '.join(self._qemu_opts(sockpath))]
        self.console_path = os.path.join(
            self.outdir, f'{self.name}.console' if self.boots == 1 else f'{self.name}.boot{self.boots}.console')
        self.console_paths.append(self.console_path)
        console = open(self.console_path, 'wb')
        self.proc = subprocess.Popen(cmd, stdout=console, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True,
                                     cwd=ROOT, env=env)
        console.close()
        deadline = time.monotonic() + self.boot_timeout
        while not os.path.exists(sockpath):
            self._check_alive()
            if time.monotonic() > deadline:
                self.kill()
                raise VMError(f'{self.name}: QEMU did not start (see {self.console_path})')
            time.sleep(0.1)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(sockpath)
        self.buf = b''
        hello = self._recv(deadline)
        if not hello.get('ready'):
            raise VMError(f'{self.name}: unexpected agent greeting {hello}')
        self.info = hello
        if hello.get('clocksource') in JIFFIES_CLOCKSOURCES:
            self.kill()
            raise VMError(f'{self.name}: the guest clocksource is {hello["clocksource"]}: '
                          'time in this VM is too coarse to test; the kernel needs '
                          'ACPI and HPET_TIMER (see tools/testing/config/ferry.config)')
        # NICs are eth0, eth1, ... in the order given, whatever udev named them.
        for i in range(len(self.nics)):
            mac = self.mac(i)
            self.run(f'dev=$(ip -o link | awk -F": " \'/{mac}/{{print $2}}\') && '
                     f'[ "$dev" = eth{i} ] || ip link set dev "$dev" name eth{i}')
        # What a reset brings the VM back to (guest_state.py).
        rep = self._call({'cmd': '__baseline__'}, 60)
        if rep.get('rc') != 0:
            raise VMError(f'{self.name}: the guest agent could not take its baseline: {rep.get("err")}')
        self.base_taint = rep.get('taint', 0)
        self.base_debug_locks = rep.get('debug_locks')
        return self

    def mac(self, nic):
        return f'52:54:00:f0:{self.mac_base:02x}:{nic:02x}'

    def _check_alive(self):
        if self.proc and self.proc.poll() is not None:
            rc = self.proc.returncode
            self.proc = None
            raise VMError(f'{self.name}: QEMU exited with {rc} (see {self.console_path}); '
                          'the console ended: ' + ' | '.join(self._console_tail()))

    def running(self):
        """Whether the VM's QEMU is still running."""
        return self.proc is not None and self.proc.poll() is None

    def kill(self):
        """Kills this VM's QEMU at once (a crash, as the peer sees it)."""
        if self.sock:
            self.sock.close()
            self.sock = None
        if self.proc:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
            self.proc = None

    def stop(self, timeout=30):
        """Powers the VM off through the agent; kills it if that does not work."""
        if self.proc and self.sock:
            try:
                self._call({'cmd': '__exit__'}, timeout)
                self.proc.wait(timeout=timeout)
            except (VMError, subprocess.TimeoutExpired, OSError):
                pass
        self.kill()

    def restart(self):
        self.kill()
        return self.start()

    # --- reuse between cases ---------------------------------------------
    def reset(self, timeout=120):
        """Brings the guest back to its state after boot (guest_state.py).
        Returns (what was done, what is left, taint, debug_locks)."""
        rep = self._call({'cmd': '__reset__'}, timeout)
        if rep.get('rc') == 2:
            raise VMError(f'{self.name}: the guest agent could not reset: {rep.get("err")}')
        return rep.get('done', []), rep.get('left', []), rep.get('taint', 0), rep.get('debug_locks')

    def end_case(self, name, timeout=20):
        """Ends the console of the case now running: marks the kernel log and
        returns (the console from the case's start up to the mark, True); the
        next case's console begins after the mark. A VM whose mark does not
        show gives (what its console has, False): it must not be reused."""
        self.marks += 1
        tag = f'ferry-runner: end of case {name} #{self.marks}'
        if self.running() and self.sock:
            try:
                self.run(f'echo {sh(tag)} > /dev/kmsg', timeout=10)
                deadline = time.monotonic() + timeout
                while time.monotonic() < deadline:
                    text = self._console_bytes()[self.slice_pos:]
                    at = text.find(tag.encode())
                    if at >= 0:
                        end = text.find(b'\n', at)
                        end = len(text) if end < 0 else end + 1
                        self.slice_pos += end
                        return text[:end].decode(errors='replace'), True
                    time.sleep(0.2)
            except (VMError, OSError):
                pass
        return self.rest_of_console(), False

    def rest_of_console(self):
        """The console from the current case's start to its end so far."""
        text = self._console_bytes()[self.slice_pos:]
        self.slice_pos += len(text)
        return text.decode(errors='replace')

    def _console_bytes(self):
        """Every boot's console, one after the other."""
        data = b''
        for p in self.console_paths:
            try:
                with open(p, 'rb') as f:
                    data += f.read()
            except OSError:
                pass
        return data

    # --- commands --------------------------------------------------------
    def _recv(self, deadline):
        while b'\n' not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise VMError(f'{self.name}: no answer from the guest in time')
            self.sock.settimeout(min(left, 1.0))
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                self._check_alive()
                continue
            if not chunk:
                self._check_alive()
                raise VMError(f'{self.name}: the guest agent went away; the console ended: '
                              + ' | '.join(self._console_tail()))
            self.buf += chunk
        line, self.buf = self.buf.split(b'\n', 1)
        return json.loads(line)

    def _call(self, req, timeout):
        if not self.sock:
            raise VMError(f'{self.name}: not running')
        self.seq += 1
        req['id'] = self.seq
        req['timeout'] = timeout
        self.sock.sendall((json.dumps(req) + '\n').encode())
        deadline = time.monotonic() + timeout + 30
        while True:
            rep = self._recv(deadline)
            if rep.get('id') == self.seq:
                return rep

    def run(self, cmd, timeout=None, check=True):
        """Runs a shell command in the guest; raises VMError if check and it
        fails. Without a timeout, it may take 60 s (times the kernel's
        slowness)."""
        if timeout is None:
            timeout = 60 * self.slow
        res = Result(cmd, self._call({'cmd': cmd}, timeout))
        if res.timed_out:
            raise VMError(f'{self.name}: timed out after {timeout} s: {cmd}')
        if check and res.rc != 0:
            raise VMError(f'{self.name}: command failed: {res}')
        return res

    def wait_for(self, cmd, timeout=None, interval=0.5):
        """Runs cmd until it succeeds; returns its result or raises VMError.
        Without a timeout, it waits 60 s (times the kernel's slowness)."""
        if timeout is None:
            timeout = 60 * self.slow
        deadline = time.monotonic() + timeout
        while True:
            res = self.run(cmd, timeout=max(5, int(timeout)), check=False)
            if res.rc == 0:
                return res
            if time.monotonic() > deadline:
                raise VMError(f'{self.name}: condition not met in {timeout} s: {res}')
            time.sleep(interval)

    # --- console ---------------------------------------------------------
    def _console_tail(self, lines=6):
        """The last lines of this boot's console, once QEMU had a moment to
        write them and exit."""
        if self.proc:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        try:
            with open(self.console_path, 'rb') as f:
                text = f.read()[-4096:].decode(errors='replace')
        except OSError:
            return []
        return [x.strip() for x in text.splitlines() if x.strip()][-lines:]

    def console(self):
        return self._console_bytes().decode(errors='replace')

    def kernel_problems(self, text=None):
        """Kernel warnings, bugs, oopses, lockdep and sanitizer reports in
        `text` (a slice of the console), or in the whole console."""
        found = []
        for line in (self.console() if text is None else text).splitlines():
            for rx, what in BAD_PATTERNS:
                if rx.search(line):
                    found.append(f'{self.name}: {what}: {line.strip()}')
                    break
        return found


VNG = os.environ.get('FERRY_VNG') or os.path.join(
    os.environ.get('FERRY_VENV', os.path.join(
        os.environ.get('FERRY_CACHE', os.path.join(
            os.environ.get('XDG_CACHE_HOME', os.path.expanduser('~/.cache')), 'ferry')),
        'venv')), 'bin', 'vng')


def sh(s):
    return shlex.quote(str(s))
