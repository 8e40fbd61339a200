# SPDX-License-Identifier: GPL-2.0
"""Guest side of VM reuse: what a test VM looks like just after boot, and how
to bring it back there after a case.

The agent takes a snapshot once the host has set the VM up (`baseline()`);
after each case `restore()` undoes what the case left behind, in an order
that lets each step succeed (processes before the mounts and modules they
hold, consumers' modules before ferry, modules before their devices), then
takes a new snapshot and reports every difference from the baseline that is
left. The host reuses the VM only when nothing is left; anything that could
not be undone (a process stuck in the kernel, a module that will not unload)
fails the case that left it, and the next case gets a fresh VM.

The kernel's log buffer is cleared, so that what a case reads with dmesg is
its own. Also reported, never undone: the kernel's taint flags and, on a lockdep
kernel, whether lockdep is still on.
"""
import ctypes
import glob
import os
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import time
from stat import S_ISCHR

import nlraw

# Sysctls a case may change and the next case must not inherit.
SYSCTLS = (
    'kernel/hung_task_timeout_secs',
    'kernel/panic_on_warn',
    'kernel/printk',
)
NULLB_CONFIGFS = '/sys/kernel/config/nullb'
RAMDISK_PAGES = '/sys/kernel/debug/ramdisk_pages'
PF_KTHREAD = 0x00200000


def sh(cmd, timeout=60):
    """Runs a shell command; returns (rc, output)."""
    try:
        p = subprocess.run(['/bin/bash', '-c', cmd], capture_output=True, text=True,
                           timeout=timeout, stdin=subprocess.DEVNULL)
        return p.returncode, (p.stdout + p.stderr).strip()
    except subprocess.TimeoutExpired:
        return None, f'timed out after {timeout} s'


def read(path, default=''):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return default


def user_processes():
    """{pid: (state, command, parent)} of every process that is not a kernel thread."""
    procs = {}
    for d in glob.glob('/proc/[0-9]*'):
        stat = read(f'{d}/stat')
        if not stat:
            continue
        # The command may hold spaces and parentheses: the fields follow the last ')'.
        fields = stat[stat.rfind(')') + 2:].split()
        if int(fields[6]) & PF_KTHREAD:
            continue
        cmd = read(f'{d}/cmdline').replace('\0', ' ').strip() or stat[stat.find('('):stat.rfind(')') + 1]
        procs[int(d[6:])] = (fields[0], cmd, int(fields[1]))
    return procs


def reap():
    """Collects the exit status of every child of the agent that ended. The
    agent adopts the orphans of its commands (it is a child subreaper, as
    virtme-ng's init reaps none when it runs no udev), so a straggler a case
    left, once killed, goes away instead of staying a zombie. Only while no
    command of the agent's runs: a command's exit status is its own."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def case_processes(base, own):
    """{pid: (state, command)} of the processes a case started: new ones that
    no daemon of the baseline (udevd's workers) nor the kernel (usermode
    helpers) started. A process whose parent exited belongs to init, and
    counts."""
    procs = user_processes()
    keep = {1, 2} | set(own)

    def daemons_child(pid):
        seen = set()
        while pid not in seen:
            seen.add(pid)
            parent = procs.get(pid, (None, None, 1))[2]
            if parent in keep:
                return parent == 2
            if parent in base:
                return True
            pid = parent
        return False
    return {pid: p[:2] for pid, p in procs.items()
            if pid not in base and pid not in keep and not daemons_child(pid)}


def mounts():
    # /proc/self/mounts writes a space as \040 (and so on) in mount points.
    return [line.split()[1].encode().decode('unicode_escape')
            for line in read('/proc/self/mounts').splitlines()]


def modules():
    return [line.split()[0] for line in read('/proc/modules').splitlines() if line]


def netlink_dump(proto, msg_type, body, dump=True):
    """The messages (type, payload) of the kernel's answer to one netlink
    request, a dump unless told otherwise. The state is read this way, not
    with `ip`, `rdma` or `losetup`: on the debug kernel each program started
    costs 2 to 3 s, and a reset with nothing to undo started nine."""
    NLM_F_REQUEST, NLM_F_DUMP, NLM_F_DUMP_INTR, NLMSG_ERROR, NLMSG_DONE = 1, 0x300, 0x10, 2, 3
    # A dump that changed while it was read is read again.
    for _ in range(5):
        with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, proto) as s:
            s.settimeout(10)
            s.bind((0, 0))
            flags = NLM_F_REQUEST | (NLM_F_DUMP if dump else 0)
            s.send(struct.pack('=IHHII', 16 + len(body), msg_type, flags, 1, 0) + body)
            out, interrupted, done = [], False, False
            while not done:
                data = s.recv(1 << 16)
                while len(data) >= 16:
                    ln, ty, fl, _, _ = struct.unpack_from('=IHHII', data)
                    if ln < 16 or ln > len(data):
                        raise OSError(f'netlink: a message of {ln} bytes in {len(data)}')
                    interrupted |= bool(fl & NLM_F_DUMP_INTR)
                    if ty in (NLMSG_ERROR, NLMSG_DONE):
                        err = -struct.unpack_from('=i', data, 16)[0] if ln >= 20 else 0
                        if err > 0:
                            raise OSError(err, os.strerror(err))
                        done = True
                        break
                    out.append((ty, data[16:ln]))
                    data = data[(ln + 3) & ~3:]
                done |= not dump
        if not interrupted:
            return out
    raise OSError('netlink: the dump kept changing while it was read')


def netlink_attrs(buf):
    """{type: payload} of a netlink message's attributes."""
    return dict(nlraw.parse_attrs(buf))


def rdma_links():
    """The RDMA devices, whose links `rdma link show` lists."""
    base = '/sys/class/infiniband'
    return sorted(os.listdir(base)) if os.path.isdir(base) else []


def rdma_netns_mode():
    """'shared' or 'exclusive': RDMA_NLDEV_CMD_SYS_GET, as `rdma system show`."""
    NETLINK_RDMA, NLDEV, SYS_GET, NETNS_MODE = 20, 5, 6, 66
    try:
        msgs = netlink_dump(NETLINK_RDMA, (NLDEV << 10) + SYS_GET, b'', dump=False)
    except OSError:
        return None
    for _, payload in msgs:
        mode = netlink_attrs(payload).get(NETNS_MODE)
        if mode:
            return 'shared' if mode[0] else 'exclusive'
    return None


def netns():
    return sorted(os.listdir('/run/netns')) if os.path.isdir('/run/netns') else []


def interfaces():
    """{name: (up, mtu, [addresses other than link-local])}, as `ip addr show`
    tells them: RTM_GETLINK and RTM_GETADDR dumps."""
    RTM_GETLINK, RTM_GETADDR, IFLA_IFNAME, IFLA_MTU = 18, 22, 3, 4
    IFA_ADDRESS, IFA_LOCAL, RT_SCOPE_LINK, IFF_UP = 1, 2, 253, 1
    names, ifs = {}, {}
    for _, payload in netlink_dump(socket.NETLINK_ROUTE, RTM_GETLINK, struct.pack('=BxHiII', 0, 0, 0, 0, 0)):
        _, _, index, flags, _ = struct.unpack_from('=BxHiII', payload)
        attrs = netlink_attrs(payload[16:])
        name = attrs.get(IFLA_IFNAME, b'').rstrip(b'\0').decode()
        mtu = struct.unpack('=I', attrs[IFLA_MTU])[0] if IFLA_MTU in attrs else None
        names[index] = name
        ifs[name] = [bool(flags & IFF_UP), mtu, []]
    for _, payload in netlink_dump(socket.NETLINK_ROUTE, RTM_GETADDR, struct.pack('=BBBBI', 0, 0, 0, 0, 0)):
        family, prefixlen, _, scope, index = struct.unpack_from('=BBBBI', payload)
        attrs = netlink_attrs(payload[8:])
        addr = attrs.get(IFA_LOCAL, attrs.get(IFA_ADDRESS))
        if (family in (socket.AF_INET, socket.AF_INET6) and scope != RT_SCOPE_LINK
                and addr and index in names):
            ifs[names[index]][2].append(f'{socket.inet_ntop(family, addr)}/{prefixlen}')
    return {name: (up, mtu, sorted(addrs)) for name, (up, mtu, addrs) in ifs.items()}


def ramdisks():
    """{ramN: pages it holds}: a zeroed (or discarded) RAM disk holds none."""
    return {os.path.basename(p): int(read(p, '0') or 0)
            for p in sorted(glob.glob(f'{RAMDISK_PAGES}/ram*'))}


def nullb_devices():
    return sorted(os.listdir(NULLB_CONFIGFS)) if os.path.isdir(NULLB_CONFIGFS) else []


def loop_devices():
    """The attached loop devices (`losetup -n -O NAME`)."""
    return sorted(f'/dev/{d}' for d in os.listdir('/sys/block')
                  if d.startswith('loop') and os.path.exists(f'/sys/block/{d}/loop/backing_file'))


def sysctls():
    return {s: read(f'/proc/sys/{s}') for s in SYSCTLS if os.path.exists(f'/proc/sys/{s}')}


def tmp_entries():
    """What the guest itself wrote to /tmp: virtme-ng lays a tmpfs over the
    host's /tmp (an overlay whose upper directory is the guest's), so the
    host's own files there are neither counted nor ever touched."""
    for line in read('/proc/self/mounts').splitlines():
        f = line.split()
        if f[1] != '/tmp':
            continue
        if f[2] == 'tmpfs':
            return sorted(os.listdir('/tmp'))
        upper = [o[len('upperdir='):] for o in f[3].split(',') if o.startswith('upperdir=')]
        if f[2] == 'overlay' and upper:
            # Whiteouts (character devices) stand for host files deleted in the guest.
            return sorted(x for x in os.listdir(upper[0])
                          if not S_ISCHR(os.lstat(os.path.join(upper[0], x)).st_mode))
    return []


def clear_kernel_log():
    """`dmesg --clear`: syslog(SYSLOG_ACTION_CLEAR). Whether it worked."""
    return ctypes.CDLL(None, use_errno=True).klogctl(5, None, 0) == 0


def taint():
    return int(read('/proc/sys/kernel/tainted', '0') or 0)


def debug_locks():
    """1 or 0 on a lockdep kernel, None elsewhere."""
    for line in read('/proc/lockdep_stats').splitlines():
        if line.strip().startswith('debug_locks:'):
            return int(line.split(':')[1])
    return None


def snapshot(own=(), base_processes=None):
    if base_processes is None:
        procs = {pid: p[:2] for pid, p in user_processes().items() if pid not in own}
    else:
        procs = case_processes(base_processes, own)
    return {
        'processes': procs,
        'mounts': mounts(),
        'modules': modules(),
        'rdma_links': rdma_links(),
        'rdma_netns': rdma_netns_mode(),
        'netns': netns(),
        'interfaces': interfaces(),
        'ramdisks': ramdisks(),
        'nullb': nullb_devices(),
        'loops': loop_devices(),
        'sysctls': sysctls(),
        'tmp': tmp_entries(),
    }


def own_pids():
    """This process and its ancestors: never signalled by a reset."""
    pids, pid = set(), os.getpid()
    while pid > 1:
        pids.add(pid)
        stat = read(f'/proc/{pid}/stat')
        if not stat:
            break
        pid = int(stat[stat.rfind(')') + 2:].split()[1])
    pids.add(1)
    return pids


def baseline():
    return snapshot(own_pids())


def differences(base, now):
    """What differs from the baseline, one line each."""
    diff = [f'process {pid} ({cmd[:80]}) in state {state} is still there'
            for pid, (state, cmd) in sorted(now['processes'].items())]
    diff += [f'{m} is still mounted' for m in now['mounts'] if m not in base['mounts']]
    diff += [f'module {m} is still loaded' for m in now['modules'] if m not in base['modules']]
    diff += [f'RDMA link {x} is still there' for x in now['rdma_links'] if x not in base['rdma_links']]
    if now['rdma_netns'] != base['rdma_netns']:
        diff.append(f'rdma netns mode is {now["rdma_netns"]}, was {base["rdma_netns"]}')
    diff += [f'network namespace {x} is still there' for x in now['netns'] if x not in base['netns']]
    for name in sorted(set(base['interfaces']) | set(now['interfaces'])):
        b, n = base['interfaces'].get(name), now['interfaces'].get(name)
        if b != n:
            diff.append(f'interface {name} is {n}, was {b}')
    diff += [f'RAM disk {r} still holds {p} pages' for r, p in now['ramdisks'].items()
             if p != base['ramdisks'].get(r, 0)]
    diff += [f'null_blk device {x} is still configured' for x in now['nullb'] if x not in base['nullb']]
    diff += [f'loop device {x} is still attached' for x in now['loops'] if x not in base['loops']]
    diff += [f'sysctl {k} is {v!r}, was {base["sysctls"].get(k)!r}'
             for k, v in now['sysctls'].items() if v != base['sysctls'].get(k)]
    diff += [f'/tmp/{x} is still there' for x in now['tmp'] if x not in base['tmp']]
    return diff


def restore(base):
    """Undoes what a case left behind; returns (what was done, what is left)."""
    done = []
    own = own_pids()

    def step(what, cmd, timeout=60):
        rc, out = sh(cmd, timeout)
        done.append(what if rc == 0 else f'{what}: failed ({out[-200:]})')
        return rc == 0
    q = shlex.quote

    # 1. Processes the case started (stragglers in the background), and their
    # process groups. A process stuck in the kernel (D state) stays: reported.
    for attempt in range(3):
        reap()
        left = case_processes(base['processes'], own)
        if not left:
            break
        if attempt == 0:
            done.append('killed ' + ', '.join(f'{pid} ({cmd[:40]})' for pid, (_, cmd) in left.items()))
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.5)

    # 2. Namespaces, mounts, loop and null_blk devices.
    if netns() != base['netns']:
        for ns in netns():
            if ns not in base['netns']:
                step(f'deleted netns {ns}', f'ip netns delete {q(ns)}')
        # The kernel hands a namespace's devices back from a work item.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not set(base['interfaces']) <= set(interfaces()):
            time.sleep(0.2)
    for m in reversed(mounts()):
        if m not in base['mounts']:
            step(f'unmounted {m}', f'umount {q(m)}')
    for dev in loop_devices():
        if dev not in base['loops']:
            step(f'detached {dev}', f'losetup -d {q(dev)}')
    for dev in nullb_devices():
        if dev not in base['nullb']:
            d = q(f'{NULLB_CONFIGFS}/{dev}')
            step(f'removed null_blk {dev}', f'echo 0 > {d}/power 2>/dev/null; rmdir {d}')

    # 3. Modules: consumers unload before what they use, so keep going while
    # each pass unloads something.
    for _ in range(8):
        left = [m for m in modules() if m not in base['modules']]
        if not left:
            break
        progress = False
        for m in left:
            rc, _ = sh(f'rmmod {q(m)}', timeout=120)
            if rc == 0:
                done.append(f'unloaded {m}')
                progress = True
        if not progress:
            break

    # 4. RDMA devices and the network.
    if rdma_netns_mode() != base['rdma_netns'] and base['rdma_netns']:
        step(f'rdma netns mode back to {base["rdma_netns"]}',
             f'rdma system set netns {base["rdma_netns"]}')
    for link in rdma_links():
        if link not in base['rdma_links']:
            step(f'deleted RDMA link {link}', f'rdma link delete {q(link)}')
    ifs = interfaces()
    for name, (up, mtu, addrs) in ifs.items():
        b = base['interfaces'].get(name)
        if b is None:
            step(f'deleted interface {name}', f'ip link delete {q(name)}')
            continue
        if (up, mtu, addrs) == b:
            continue
        dev = q(name)
        cmds = [f'ip addr flush dev {dev} scope global', f'ip addr flush dev {dev} scope host']
        cmds += [f'ip addr add {a} dev {dev}' for a in b[2]]
        cmds.append(f'ip link set {dev} mtu {b[1]} {"up" if b[0] else "down"}')
        step(f'reset interface {name}', ' && '.join(cmds))

    # 5. Sysctls, RAM disks, /tmp.
    for k, v in sysctls().items():
        if v != base['sysctls'].get(k):
            try:
                with open(f'/proc/sys/{k}', 'w') as f:
                    f.write(base['sysctls'][k])
                done.append(f'sysctl {k} back to {base["sysctls"][k]!r}')
            except OSError as e:
                done.append(f'sysctl {k} back to {base["sysctls"][k]!r}: failed ({e})')
    for r, pages in ramdisks().items():
        if pages != base['ramdisks'].get(r, 0):
            # Discarding frees a brd page; what reads back is zeros.
            step(f'zeroed {r} ({pages} pages)', f'blkdiscard {q("/dev/" + r)}')
    # Nothing under /tmp is removed while something is still mounted there:
    # rmtree would walk into that filesystem.
    new = [x for x in tmp_entries() if x not in base['tmp']]
    if any(m.startswith('/tmp/') for m in mounts() if m not in base['mounts']):
        done.append('left /tmp alone: a mount under it survived')
        new = []
    for x in new:
        p = f'/tmp/{x}'
        try:
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p)
            else:
                os.unlink(p)
        except OSError as e:
            done.append(f'removing {p} failed: {e}')
    if new:
        done.append(f'removed from /tmp: {" ".join(new)}')
    # 6. The kernel log: the next case's `dmesg` shows its own messages only
    # (the console, which the runner judges, keeps everything).
    if not clear_kernel_log():
        done.append('clearing the kernel log failed')
    return done, differences(base, snapshot(own, base['processes']))
