# SPDX-License-Identifier: GPL-2.0
"""ferry_blk cases: a block device exported by the target and mapped back
as /dev/ferryblkN by the client, in one VM over rxe in loopback."""
import json

from harness import case

PORT = 7473
MIB = 1 << 20


def blk_setup(t, vm, size_mib=64):
    """rxe, ferry and ferry_blk loaded, a listener, and a loop device of
    `size_mib` MiB on a file in memory: returns the loop device."""
    t.net_up(vm, 0, 1)
    t.rxe_add(vm)
    t.insmod(vm)
    vm.run(f'insmod {t.sample("ferry_blk")}')
    vm.run(f'{t.ferryctl} listener add 192.0.2.1 port {PORT}')
    vm.run(f'truncate -s {size_mib}M /dev/shm/blk0.img')
    return vm.run('losetup -f --show /dev/shm/blk0.img').out.strip()


def blk_teardown(t, vm, loop):
    vm.run('rmmod ferry_blk')
    vm.run(f'losetup -d {loop} && rm -f /dev/shm/blk0.img')
    vm.run('rmmod ferry')


def sha(vm, dev, nbytes):
    """The sha256 of the first `nbytes` of `dev`, read directly."""
    return vm.run(f'head -c {nbytes} {dev} | sha256sum').out.split()[0]


def show(t, vm):
    return t.ferryctl_json(vm, '-s blk show')


@case(timeout=300)
def blk_map_verify(t):
    """A loop device is exported and mapped back over ferry: the disk's
    size and block size agree with the export's, 32 MiB of random data
    written through the disk (direct I/O, 1 MiB and 4 KiB writes) read back
    identical, and the target's device holds the same bytes (sha256 on both
    sides); the target counted the writes. Exporting a device in use is
    refused with EBUSY, and so is unmapping an open disk; then the mapping
    and the export go, and the module unloads."""
    vm = t.vm
    loop = blk_setup(t, vm)
    made = t.ferryctl_json(vm, f'blk export add ram0 path {loop}')
    t.eq(made[0]['sectors'], 64 * MIB // 512, 'exported sectors')
    r = vm.run(f'{t.ferryctl} blk export add again path {loop}', check=False)
    t.check(r.rc == 2 and 'in use' in r.err, f'second export of one device: {r.rc} {r.err!r}')
    maps = t.ferryctl_json(vm, f'blk map 192.0.2.1 port {PORT} export ram0 channels 2')
    t.require(len(maps) == 1, f'one mapping: {maps}')
    disk = '/dev/' + maps[0]['disk']
    t.log(f'mapped {disk}: {maps[0]}')
    vm.wait_for(f'test -b {disk}', timeout=30)
    for what in ('--getsz', '--getss', '--getpbsz', '--getro'):
        t.eq(vm.run(f'blockdev {what} {disk}').out.strip(),
             vm.run(f'blockdev {what} {loop}').out.strip(), f'blockdev {what}')
    n = 32 * MIB
    vm.run(f'head -c {n} /dev/urandom > /dev/shm/pattern')
    want = sha(vm, '/dev/shm/pattern', n)
    vm.run(f'dd if=/dev/shm/pattern of={disk} bs=1M count=16 oflag=direct status=none')
    vm.run(f'dd if=/dev/shm/pattern of={disk} bs=4k skip=4096 seek=4096 count=4096 '
           f'oflag=direct status=none')
    vm.run(f'echo 3 > /proc/sys/vm/drop_caches')
    t.eq(sha(vm, disk, n), want, 'data read back through the disk')
    t.eq(sha(vm, loop, n), want, 'data on the target\'s device')
    st = show(t, vm)
    export = [x for x in st if x['kind'] == 'export'][0]
    t.log(f'target counted: {export["stats"]}')
    t.check(export['stats']['bytes_written'] >= n, f'target bytes written: {export["stats"]}')
    t.eq(export['users'], 1, 'sessions using the export')
    # Open, it cannot be unmapped.
    r = vm.run(f'exec 3<{disk}; {t.ferryctl} blk unmap {disk}; rc=$?; exec 3<&-; exit $rc',
               check=False)
    t.check(r.rc == 2 and 'open' in r.err, f'unmapping an open disk: {r.rc} {r.err!r}')
    r = vm.run(f'{t.ferryctl} blk export del ram0', check=False)
    t.check(r.rc == 2 and 'mapped' in r.err, f'deleting a mapped export: {r.rc} {r.err!r}')
    vm.run(f'{t.ferryctl} blk unmap {disk}')
    vm.run(f'{t.ferryctl} blk export del ram0')
    t.eq(show(t, vm), [], 'nothing left')
    vm.run('rm -f /dev/shm/pattern')
    blk_teardown(t, vm, loop)


FIO_SIZES = (('512', 512), ('4k', 4096), ('64k', 65536), ('1m', MIB), ('4m', 4 * MIB))


def fio(t, vm, disk, bs, qd, verify_only=False):
    """fio with crc32c verification of random writes of `bs` at depth `qd`,
    two jobs on disjoint 32 MiB ranges (64 MiB in all); with `verify_only`,
    the separate pass that reads back what the writes left. Returns (bytes
    written, bytes verified)."""
    cmd = (f'fio --name=v --filename={disk} --direct=1 --ioengine=libaio --rw=randwrite '
           f'--bs={bs} --iodepth={qd} --numjobs=2 --size=32M --offset_increment=32M '
           f'--verify=crc32c --verify_fatal=1 --do_verify=1 --randseed=7 '
           f'--group_reporting --output-format=json')
    if verify_only:
        cmd += ' --verify_only=1'
    r = vm.run(cmd, timeout=600 * t.slow, check=False)
    t.require(r.rc == 0, f'fio bs={bs} qd={qd}{" verify_only" if verify_only else ""}: '
                         f'rc {r.rc} {r.err[-400:]!r}')
    job = json.loads(r.out[r.out.index('{'):])['jobs'][0]
    t.eq(job['error'], 0, f'fio bs={bs} qd={qd} errors')
    return job['write']['io_bytes'], job['read']['io_bytes']


@case(timeout=900)
def blk_fio_verify(t):
    """fio verifies (crc32c, verify_fatal) random writes of 512 B, 4 KiB,
    64 KiB, 1 MiB and 4 MiB (which the disk splits: it takes 512 KiB) at
    queue depths 1 and 32, two jobs on disjoint 32 MiB ranges (64 MiB per
    block size), then reads everything back in a separate verifying pass;
    the target's device and the disk hold the same bytes (sha256)."""
    vm = t.vm
    loop = blk_setup(t, vm, size_mib=96)
    vm.run(f'{t.ferryctl} blk export add v0 path {loop}')
    disk = '/dev/' + t.ferryctl_json(vm, f'blk map 192.0.2.1 port {PORT} export v0 channels 2')[0]['disk']
    vm.wait_for(f'test -b {disk}', timeout=30)
    total = 0
    for name, _ in FIO_SIZES:
        for qd in (1, 32):
            written, verified = fio(t, vm, disk, name, qd)
            _, again = fio(t, vm, disk, name, qd, verify_only=True)
            t.log(f'bs {name} qd {qd}: {written} bytes written, {verified} verified, '
                  f'{again} verified again')
            t.check(written >= 64 * MIB and verified >= 64 * MIB and again >= 64 * MIB,
                    f'bs {name} qd {qd}: too few bytes ({written}, {verified}, {again})')
            total += verified + again
    t.log(f'{total} bytes verified in all')
    vm.run('echo 3 > /proc/sys/vm/drop_caches')
    t.eq(sha(vm, disk, 64 * MIB), sha(vm, loop, 64 * MIB), 'sha256 of the disk and the export')
    st = [x for x in show(t, vm) if x['kind'] == 'export'][0]['stats']
    t.log(f'target counted: {st}')
    t.eq(st['failed'], 0, 'failed operations on the target')
    vm.run(f'{t.ferryctl} blk unmap {disk}')
    vm.run(f'{t.ferryctl} blk export del v0')
    blk_teardown(t, vm, loop)


@case(timeout=300)
def blk_filesystem(t):
    """ext4 on a mapped disk: made, mounted, files written and synced,
    unmounted, checked clean by e2fsck -fn, mounted again with every file's
    sha256 unchanged. The target's counters (flushes among them) are
    logged."""
    vm = t.vm
    loop = blk_setup(t, vm, size_mib=128)
    vm.run(f'{t.ferryctl} blk export add fs0 path {loop}')
    disk = '/dev/' + t.ferryctl_json(vm, f'blk map 192.0.2.1 port {PORT} export fs0')[0]['disk']
    vm.wait_for(f'test -b {disk}', timeout=30)
    vm.run(f'mkfs.ext4 -q -F {disk}', timeout=120 * t.slow)
    vm.run(f'mkdir -p /tmp/fb && mount {disk} /tmp/fb')
    vm.run('for i in $(seq 1 20); do head -c $((i * 100000)) /dev/urandom > /tmp/fb/f$i; done; '
           'mkdir /tmp/fb/d && cp /tmp/fb/f1* /tmp/fb/d/ && sync', timeout=120 * t.slow)
    before = vm.run('cd /tmp/fb && sha256sum f* d/*').out
    vm.run('umount /tmp/fb')
    r = vm.run(f'e2fsck -fn {disk}', check=False, timeout=120 * t.slow)
    t.eq(r.rc, 0, f'e2fsck -fn: {r.out[-300:]!r}')
    vm.run(f'mount {disk} /tmp/fb')
    t.eq(vm.run('cd /tmp/fb && sha256sum f* d/*').out, before, 'files after a remount')
    vm.run('umount /tmp/fb')
    st = [x for x in show(t, vm) if x['kind'] == 'export'][0]['stats']
    t.log(f'target counted: {st}')
    vm.run(f'{t.ferryctl} blk unmap {disk}')
    vm.run(f'{t.ferryctl} blk export del fs0')
    blk_teardown(t, vm, loop)


@case(timeout=300)
def blk_reconnect(t):
    """The target's end of a mapping's session is closed while data is on
    the disk: the client reconnects, opens the export again under the same
    mapping (the target lets the new session take the old one's place), and
    I/O goes on: data written before and after reads back identical, and the
    export still has one user."""
    vm = t.vm
    loop = blk_setup(t, vm)
    vm.run(f'{t.ferryctl} blk export add rc0 path {loop}')
    disk = '/dev/' + t.ferryctl_json(vm, f'blk map 192.0.2.1 port {PORT} export rc0 channels 2')[0]['disk']
    vm.wait_for(f'test -b {disk}', timeout=30)
    n = 16 * MIB
    vm.run(f'head -c {n} /dev/urandom > /dev/shm/pattern')
    vm.run(f'dd if=/dev/shm/pattern of={disk} bs=1M count=8 oflag=direct status=none')
    server = [s for s in t.ferryctl_json(vm, 'session show') if s['role'] == 'server']
    t.require(len(server) == 1, f'one server session: {server}')
    vm.run(f'{t.ferryctl} session disconnect id {server[0]["id"]}')
    t.until(lambda: any(s['role'] == 'client' and s['state'] == 'connected' and s.get('reconnects', 0) >= 1
                        for s in t.ferryctl_json(vm, 'session show')),
            60 * t.slow, 'the client session reconnected')
    # The second half goes over the new connection, after the re-open.
    vm.run(f'dd if=/dev/shm/pattern of={disk} bs=1M skip=8 seek=8 count=8 oflag=direct status=none',
           timeout=120 * t.slow)
    vm.run('echo 3 > /proc/sys/vm/drop_caches')
    want = sha(vm, '/dev/shm/pattern', n)
    t.eq(sha(vm, disk, n), want, 'data read back through the disk after the reconnect')
    t.eq(sha(vm, loop, n), want, 'data on the target\'s device')
    st = show(t, vm)
    m = [x for x in st if x['kind'] == 'map'][0]
    e = [x for x in st if x['kind'] == 'export'][0]
    t.eq(m['state'], 'up', 'mapping state')
    t.eq(e['users'], 1, 'sessions using the export (the new one took the old one\'s place)')
    vm.run(f'{t.ferryctl} blk unmap {disk}')
    vm.run(f'{t.ferryctl} blk export del rc0')
    vm.run('rm -f /dev/shm/pattern')
    blk_teardown(t, vm, loop)


@case(timeout=300)
def blk_access_resize(t):
    """Access rules and resize. A read-only export maps read-only
    (`blockdev --getro` 1): reads work, writes fail. A read-write export
    that is not shared takes one read-write mapping: a second gets EBUSY,
    a read-only one is allowed. The export's device grows (the loop file,
    then `losetup -c`), `blk export resize` tells the client, whose disk
    follows (`blockdev --getsz`), and the new range takes data that reads
    back identical."""
    vm = t.vm
    loop = blk_setup(t, vm)
    vm.run(f'{t.ferryctl} blk export add ro0 path {loop} ro')
    disk = '/dev/' + t.ferryctl_json(vm, f'blk map 192.0.2.1 port {PORT} export ro0 ro')[0]['disk']
    vm.wait_for(f'test -b {disk}', timeout=30)
    t.eq(vm.run(f'blockdev --getro {disk}').out.strip(), '1', 'blockdev --getro of a read-only map')
    vm.run(f'dd if={disk} of=/dev/null bs=1M count=4 iflag=direct status=none')
    r = vm.run(f'dd if=/dev/zero of={disk} bs=4k count=1 oflag=direct status=none', check=False)
    t.check(r.rc != 0, f'a write to a read-only disk succeeded: {r}')
    # Mapping a read-only export read-write is refused.
    r = vm.run(f'{t.ferryctl} blk map 192.0.2.1 port {PORT} export ro0', check=False)
    t.check(r.rc == 2 and 'read-only' in r.err, f'read-write map of a read-only export: {r}')
    vm.run(f'{t.ferryctl} blk unmap {disk}')
    vm.run(f'{t.ferryctl} blk export del ro0')
    vm.run(f'{t.ferryctl} blk export add rw0 path {loop}')
    first = '/dev/' + t.ferryctl_json(vm, f'blk map 192.0.2.1 port {PORT} export rw0')[0]['disk']
    r = vm.run(f'{t.ferryctl} blk map 192.0.2.1 port {PORT} export rw0', check=False)
    t.check(r.rc == 2 and 'another client' in r.err, f'second read-write map: {r}')
    second = '/dev/' + t.ferryctl_json(vm, f'blk map 192.0.2.1 port {PORT} export rw0 ro')[0]['disk']
    vm.wait_for(f'test -b {second}', timeout=30)
    vm.run(f'{t.ferryctl} blk unmap {second}')
    # Resize: 64 MiB to 96 MiB.
    vm.run('truncate -s 96M /dev/shm/blk0.img')
    vm.run(f'losetup -c {loop}')
    grown = t.ferryctl_json(vm, 'blk export resize rw0')[0]['sectors']
    t.eq(grown, 96 * MIB // 512, 'the export\'s new capacity')
    t.until(lambda: vm.run(f'blockdev --getsz {first}').out.strip() == str(grown),
            30 * t.slow, 'the client disk follows the resize')
    vm.run(f'head -c {8 * MIB} /dev/urandom > /dev/shm/pattern')
    vm.run(f'dd if=/dev/shm/pattern of={first} bs=1M seek=80 count=8 oflag=direct status=none')
    t.eq(vm.run(f'dd if={first} bs=1M skip=80 count=8 iflag=direct status=none | sha256sum').out,
         vm.run('sha256sum < /dev/shm/pattern').out, 'data in the new range')
    vm.run(f'{t.ferryctl} blk unmap {first}')
    vm.run(f'{t.ferryctl} blk export del rw0')
    vm.run('rm -f /dev/shm/pattern')
    blk_teardown(t, vm, loop)
