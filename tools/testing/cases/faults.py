# SPDX-License-Identifier: GPL-2.0
"""ferry_blk through faults between two hosts. A exports, B maps the disk
and runs fio verify (crc32c, verify_fatal) on it through the fault; the
disk comes back by itself, fio ends clean, and the written range has the
same sha256 on both hosts. Each case logs one `fault table:` line: the
requests requeued, the seconds from the fault's end to the disk live
again, fio's I/O errors, bytes verified, and whether the sha256 matched."""
import os
import time

from harness import case
from blk import PORT, MIB, sha, map_of, fio_verify_background, fio_result

# The uuid every export of these cases is given, so a target that comes
# back offers the same identity.
UUID = '6b1f7c52-8d0e-4c3a-9f21-5a4e2d7c9b10'
NVME_NQN = 'nqn.2014-08.org.example:ferry-flap'


def target_up(t, a, dev, name='f0', listen=True):
    """A: ferry_blk, a listener (with `listen`), and `dev` exported as
    `name` with UUID."""
    a.run(f'insmod {t.sample("ferry_blk")}')
    if listen:
        a.run(f'{t.ferryctl} listener add 192.0.2.1 port {PORT}')
    a.run(f'{t.ferryctl} blk export add {name} path {dev} uuid {UUID}')


def client_map(t, b, name='f0', how=''):
    """B: ferry_blk and the export mapped (`how`: more of the map command);
    the disk's path."""
    b.run(f'insmod {t.sample("ferry_blk")}')
    m = t.ferryctl_json(b, f'blk map 192.0.2.1 port {PORT} export {name} channels 2 {how}'.rstrip())
    disk = '/dev/' + m[0]['disk']
    b.wait_for(f'test -b {disk}', timeout=30 * t.slow)
    return disk


def live_again(t, b, since, timeout):
    """Waits for every mapping to be live over a session that reconnected;
    the seconds since `since`."""
    t.until(lambda: all(x['state'] == 'live' for x in t.ferryctl_json(b, 'blk show')
                        if x['kind'] == 'map') and any(
        s['role'] == 'client' and s['state'] == 'connected' and s.get('reconnects', 0) >= 1
        for s in t.ferryctl_json(b, 'session show')), timeout, 'the disk live again')
    return time.monotonic() - since


def map_stats(t, b, disk):
    """The counters of B's mapping whose disk is `disk`."""
    return [x for x in t.ferryctl_json(b, '-s blk show')
            if x['kind'] == 'map' and '/dev/' + x['disk'] == disk][0]['stats']


def fio_busy(vm):
    return vm.run('pgrep -x fio', check=False).rc == 0


def fault_table(t, fault, requeued, back_s, fio, sha_equal):
    rc, errors, written, verified = fio
    t.log(f'fault table: {fault} | requeued {requeued} | live again after {back_s:.1f} s | '
          f'fio exit {rc}, I/O errors {errors} | {written} bytes written, {verified} verified | '
          f'sha256 equal: {sha_equal}')
    t.eq((rc, errors), (0, 0), f'{fault}: fio exit code and errors')


def nvmet_export(a, dev):
    """A: `dev` as namespace 1 of NVME_NQN, on an nvmet-rdma port at
    192.0.2.1:4420."""
    cfg = '/sys/kernel/config/nvmet'
    a.run('mount -t configfs none /sys/kernel/config 2>/dev/null; true')
    a.run(f'mkdir {cfg}/subsystems/{NVME_NQN} && '
          f'echo 1 > {cfg}/subsystems/{NVME_NQN}/attr_allow_any_host && '
          f'mkdir {cfg}/subsystems/{NVME_NQN}/namespaces/1 && '
          f'echo {dev} > {cfg}/subsystems/{NVME_NQN}/namespaces/1/device_path && '
          f'echo 1 > {cfg}/subsystems/{NVME_NQN}/namespaces/1/enable && '
          f'mkdir {cfg}/ports/1 && echo rdma > {cfg}/ports/1/addr_trtype && '
          f'echo ipv4 > {cfg}/ports/1/addr_adrfam && echo 192.0.2.1 > {cfg}/ports/1/addr_traddr && '
          f'echo 4420 > {cfg}/ports/1/addr_trsvcid && '
          f'ln -s {cfg}/subsystems/{NVME_NQN} {cfg}/ports/1/subsystems/{NVME_NQN}')


def nvmet_del(a):
    cfg = '/sys/kernel/config/nvmet'
    a.run(f'rm {cfg}/ports/1/subsystems/{NVME_NQN} && rmdir {cfg}/ports/1 && '
          f'echo 0 > {cfg}/subsystems/{NVME_NQN}/namespaces/1/enable && '
          f'rmdir {cfg}/subsystems/{NVME_NQN}/namespaces/1 && rmdir {cfg}/subsystems/{NVME_NQN}')


def nvme_connect(t, b):
    """B: connects to NVME_NQN over nvme-rdma (as `nvme connect` does,
    through /dev/nvme-fabrics): the controller's name and namespace's
    path."""
    b.run(f'echo "transport=rdma,traddr=192.0.2.1,trsvcid=4420,nqn={NVME_NQN}" > /dev/nvme-fabrics')
    ctrl = b.run(f'grep -l {NVME_NQN} /sys/class/nvme/*/subsysnqn').out.split('/')[4]
    b.wait_for(f'ls -d /sys/class/nvme/{ctrl}/nvme*n1', timeout=30 * t.slow)
    ns = b.run(f'ls -d /sys/class/nvme/{ctrl}/nvme*n1').out.split()[0].rsplit('/', 1)[1]
    b.wait_for(f'test -b /dev/{ns}', timeout=30 * t.slow)
    return ctrl, f'/dev/{ns}'


def shm_loop(vm, name, mib):
    vm.run(f'truncate -s {mib}M /dev/shm/{name}.img')
    return vm.run(f'losetup -f --show /dev/shm/{name}.img').out.strip()


def cleanup_pair(t, a, b, disk, loops):
    b.run(f'{t.ferryctl} blk unmap {disk}')
    a.run(f'{t.ferryctl} blk export del f0')
    for vm in (a, b):
        vm.run('rmmod ferry_blk')
    for loop in loops:
        a.run(f'losetup -d {loop}')
    a.run('rm -f /dev/shm/*.img')
    b.run('rm -f /tmp/fio*.json /tmp/fio*.json.rc')
    for vm in (a, b):
        vm.run('rmmod ferry')


@case(topology='pair', timeout=600)
def blk_link_flap(t):
    """The client's link goes down for 4 s and up again while fio verifies
    on its ferry_blk disk (fast-fail 30) and, beside it, on an nvme-rdma
    namespace of the same target. Both reconnect by themselves, no I/O
    fails, and fio verify ends clean on both.

    Before the test kernel's rxe patch 0004 neither came back: a MAD sent
    while the link was down (the DREQ of the connection being torn down)
    left the client's QP1 in the error state for good, so every connect
    request after the flap was dropped on the client.

    On the debug kernel ferry_blk runs alone: removing nvmet's port at
    the end trips lockdep in nvmet itself (nvmet_config_sem taken before
    rdma_cm's handler_mutex in nvmet_port_subsys_drop_link, after the
    opposite order in an I/O queue's connect)."""
    a, b = t.pair_up()
    nvme = t.slow == 1
    loop = shm_loop(a, 'f0', 64)
    nvloop = shm_loop(a, 'nv0', 32)
    target_up(t, a, loop)
    if nvme:
        nvmet_export(a, nvloop)
    disk = client_map(t, b, how=f'fast-fail {30 * t.slow}')
    mib = 16 if t.slow == 1 else 2
    fio_verify_background(t, b, disk, mib, 6, '/tmp/fio.json')
    if nvme:
        ctrl, ns = nvme_connect(t, b)
        fio_verify_background(t, b, ns, mib, 6, '/tmp/fio-nv.json')
    b.run(f'sleep {3 * t.slow}')
    before = map_of(t, b)['stats']
    b.run('ip link set eth0 down; sleep 4; ip link set eth0 up')
    up = time.monotonic()
    t.require(fio_busy(b), 'fio still running when the link came back (the flap hit I/O)')
    back = live_again(t, b, up, 90 * t.slow)
    if nvme:
        t.until(lambda: b.run(f'cat /sys/class/nvme/{ctrl}/state').out.strip() == 'live',
                60 * t.slow, 'the nvme-rdma controller live again')
        t.log(f'nvme-rdma live again after {time.monotonic() - up:.1f} s')
    res = fio_result(t, b, '/tmp/fio.json', 400 * t.slow)
    after = map_of(t, b)['stats']
    t.log(f'map counters before {before}, after {after}')
    b.run('echo 3 > /proc/sys/vm/drop_caches')
    n = mib * MIB
    same = sha(b, disk, n) == sha(a, loop, n)
    fault_table(t, f'link down 4 s (fast-fail {30 * t.slow})', after['requeues'] - before['requeues'],
                back, res, same)
    t.check(same, 'sha256 of the disk and the export')
    t.eq(after['fast_failed'], 0, 'requests failed fast')
    t.check(res[3] >= 6 * mib * MIB, f'fio verified 6 x {mib} MiB')
    if nvme:
        nv = fio_result(t, b, '/tmp/fio-nv.json', 400 * t.slow)
        t.eq(nv[:2], (0, 0), 'nvme-rdma: fio exit code and errors')
        b.run(f'echo 1 > /sys/class/nvme/{ctrl}/delete_controller')
        nvmet_del(a)
    cleanup_pair(t, a, b, disk, (loop, nvloop))


def ride_through(t, fault, cause):
    """A exports a 64 MiB loop device, B maps it and runs fio verify on it
    (6 passes of 16 MiB; 2 MiB on the debug kernel); `cause(a, b)` makes
    the fault and returns once it is over. The disk must be live again by
    itself, fio end clean, and both sides' sha256 match; logs the fault
    table line for `fault`."""
    a, b = t.pair_up()
    loop = shm_loop(a, 'f0', 64)
    target_up(t, a, loop)
    disk = client_map(t, b)
    mib = 16 if t.slow == 1 else 2
    fio_verify_background(t, b, disk, mib, 6, '/tmp/fio.json')
    b.run(f'sleep {3 * t.slow}')
    before = map_of(t, b)['stats']
    cause(a, b)
    over = time.monotonic()
    t.require(fio_busy(b), 'fio still running when the fault was over')
    back = live_again(t, b, over, 90 * t.slow)
    res = fio_result(t, b, '/tmp/fio.json', 400 * t.slow)
    after = map_of(t, b)['stats']
    b.run('echo 3 > /proc/sys/vm/drop_caches')
    n = mib * MIB
    same = sha(b, disk, n) == sha(a, loop, n)
    fault_table(t, fault, after['requeues'] - before['requeues'], back, res, same)
    t.check(same, 'sha256 of the disk and the export')
    cleanup_pair(t, a, b, disk, (loop,))


@case(topology='pair', timeout=600)
def blk_client_device_readd(t):
    """The client's rdma link is deleted and added back while fio verifies
    on its disk: the session's channels fail with the device, it
    reconnects on the new device, and fio verify ends clean."""
    def cause(a, b):
        b.run('rdma link delete rxe0; sleep 2')
        t.rxe_add(b)
    ride_through(t, 'client rdma link delete, add after 2 s', cause)


@case(topology='pair', timeout=600)
def blk_target_reload(t):
    """The target's ferry_blk is reloaded under load: `rmmod` closes its
    export once the operations at work have ended and cuts the client's
    session without telling it the export was deleted; loaded again, with
    the export added back under the same identity (and a new handle), the
    client reopens it, and fio verify ends clean."""
    def cause(a, b):
        a.run('rmmod ferry_blk')
        t.check('export f0: closed (ferry_blk unloads)' in a.run('dmesg').out,
                'the target logged the export closed')
        a.run('sleep 2')
        target_up(t, a, a.run('losetup -j /dev/shm/f0.img | cut -d: -f1').out.strip(),
                  listen=False)
    ride_through(t, 'target ferry_blk reloaded, same identity', cause)


@case(topology='pair', timeout=900)
def blk_target_reboot(t):
    """The target VM is killed (no shutdown: its QEMU gets SIGKILL) while
    B runs fio verify on one disk and writes files to an ext4 on another,
    both exported from A's virtio disks, backed by host files (what A
    acknowledged survives, as on a server's own disk). A boots again and
    exports both under the same identities; B's disks, within give-up,
    come back by themselves: fio verify ends clean, the files read back
    as written, and `e2fsck -fn` finds the filesystem clean. A comes back
    with its listener 5 s before its exports, as a host's configuration
    may: the clients (reconnect-delay 2) find no export at first and keep
    opening it, and their disks stay."""
    a, b = t.a, t.b
    files = []
    for i, mib in enumerate((64, 64)):
        path = os.path.join(t.outdir, f'target-disk{i}.img')
        with open(path, 'wb') as f:
            f.truncate(mib * MIB)
        files.append(path)
    a.kill()
    a.disks = files
    a.start()

    def target(late=0):
        t.net_up(a, 0, 1)
        t.rxe_add(a)
        t.insmod(a)
        a.run(f'insmod {t.sample("ferry_blk")}')
        a.run(f'{t.ferryctl} listener add 192.0.2.1 port {PORT}')
        a.run(f'sleep {late}')
        a.run(f'{t.ferryctl} blk export add f0 path /dev/vda uuid {UUID}')
        a.run(f'{t.ferryctl} blk export add fs0 path /dev/vdb uuid {UUID[:-1]}1')

    target()
    t.net_up(b, 0, 2)
    t.rxe_add(b)
    t.insmod(b)
    b.wait_for('ping -c1 -W1 192.0.2.1', timeout=30 * t.slow)
    disk = client_map(t, b, how='reconnect-delay 2')
    m = t.ferryctl_json(b, f'blk map 192.0.2.1 port {PORT} export fs0 reconnect-delay 2')
    fsdisk = '/dev/' + m[0]['disk']
    b.wait_for(f'test -b {fsdisk}', timeout=30 * t.slow)
    b.run(f'mkfs.ext4 -q {fsdisk} && mkdir -p /tmp/fsm && mount {fsdisk} /tmp/fsm')
    b.run('mkdir -p /tmp/src && for i in $(seq 1 40); do head -c 262144 /dev/urandom > /tmp/src/f$i; done')
    # Files copied one by one, each synced, through the reboot.
    b.run('(for i in $(seq 1 40); do cp /tmp/src/f$i /tmp/fsm/f$i && sync /tmp/fsm/f$i || '
          'echo $i >> /tmp/cp.err; sleep 0.5; done; echo done > /tmp/cp.rc) >/dev/null 2>&1 &')
    mib = 16 if t.slow == 1 else 2
    fio_verify_background(t, b, disk, mib, 6, '/tmp/fio.json')
    # The disks wait out the reboot (no fast-fail), longer than the test
    # kernel's 30 s hung-task threshold: a distribution kernel's is 120 s
    # (scaled as every wait: the debug kernel boots for minutes).
    b.run(f'echo {120 * t.slow} > /proc/sys/kernel/hung_task_timeout_secs')
    b.run(f'sleep {3 * t.slow}')
    before = map_stats(t, b, disk)
    a.kill()
    killed = time.monotonic()
    a.start()
    target(late=5 * t.slow)
    t.log(f'the target was back {time.monotonic() - killed:.1f} s after it was killed')
    back_from = time.monotonic()
    t.require(fio_busy(b), 'fio still running when the target came back')
    back = live_again(t, b, back_from, 120 * t.slow)
    res = fio_result(t, b, '/tmp/fio.json', 400 * t.slow)
    after = map_stats(t, b, disk)
    t.until(lambda: b.run('test -s /tmp/cp.rc', check=False).rc == 0, 120 * t.slow,
            'the files copied')
    t.eq(b.run('cat /tmp/cp.err 2>/dev/null', check=False).out.strip(), '', 'files that failed to copy')
    b.run('echo 3 > /proc/sys/vm/drop_caches')
    t.eq(b.run('cd /tmp/src && sha256sum f* > /tmp/src.sum && cd /tmp/fsm && sha256sum -c --quiet /tmp/src.sum',
               check=False).rc, 0, 'the files read back as written')
    b.run('umount /tmp/fsm && echo 30 > /proc/sys/kernel/hung_task_timeout_secs')
    r = b.run(f'e2fsck -fn {fsdisk}', check=False)
    t.eq(r.rc, 0, f'e2fsck -fn of the filesystem through the reboot ({r.out[-300:]!r})')
    n = mib * MIB
    same = sha(b, disk, n) == sha(a, '/dev/vda', n)
    fault_table(t, 'target VM killed and booted again (give-up 600)',
                after['requeues'] - before['requeues'], back, res, same)
    t.check(same, 'sha256 of the disk and the export')
    t.check('(yet): opening again' in b.run('dmesg').out,
            'the clients found no export at first, and opened again')
    for d in (disk, fsdisk):
        b.run(f'{t.ferryctl} blk unmap {d}')
    b.run('rmmod ferry_blk && rmmod ferry; rm -rf /tmp/fsm /tmp/src /tmp/src.sum /tmp/cp.rc /tmp/cp.err '
          '/tmp/fio.json /tmp/fio.json.rc')
    # A goes with its disks: the next case boots a VM without them.
    a.kill()
    for path in files:
        os.unlink(path)
