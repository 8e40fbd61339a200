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
