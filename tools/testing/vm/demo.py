#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""`make demo`: boots two VMs joined by one Ethernet link, gives each a
soft-RoCE device, loads ferry and shows what ferryctl reports on both, then
opens a session from one to the other (and one to a port nobody listens on),
moves messages and zero-copy requests, and maps A's RAM disk on B with
ferry_blk: a filesystem on it, files written and read back, a 10-second fio."""
import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ferryvm import VM, Link, VMError  # noqa: E402


def show(vm, cmd, timeout=120):
    print(f'\n[{vm.name}]# {cmd}')
    r = vm.run(cmd, check=False, timeout=timeout)
    sys.stdout.write(r.out)
    sys.stdout.write(r.err)
    if r.rc != 0:
        raise VMError(f'{vm.name}: "{cmd}" failed with {r.rc}')


def block_device(hosts, ctl, sample):
    """ferry_blk: A exports a RAM disk (null_blk, memory-backed, 256 MiB), B
    maps it, makes ext4 on it, writes and reads back files, runs fio for 10
    seconds, and both show their side; then the disk goes away again."""
    a, b = hosts
    for vm in hosts:
        show(vm, f'insmod {sample("ferry_blk")}')
    nullb = '/sys/kernel/config/nullb/ramdisk'
    show(a, f'mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config; '
            f'mkdir {nullb} && echo 256 > {nullb}/size && echo 1 > {nullb}/memory_backed && '
            f'echo 1 > {nullb}/discard && echo 1 > {nullb}/power && ls -l /dev/ramdisk')
    # (A null_blk device made through configfs is named after its directory.)
    dev = '/dev/ramdisk'
    show(a, f'{ctl} blk export add ram0 path {dev}')
    show(b, f'{ctl} blk map 192.0.2.1 port 7471 export ram0 channels 2')
    disk = '/dev/' + [m for m in json.loads(b.run(f'{ctl} -j blk show').out)
                      if m['kind'] == 'map'][0]['disk']
    show(b, f'udevadm settle; lsblk -o NAME,SIZE,RO,LOG-SEC,DISC-MAX,ROTA {disk}; '
            f'blockdev --getsz --getss {disk}')
    show(b, f'mkfs.ext4 -q {disk} && mkdir -p /tmp/demo && mount {disk} /tmp/demo && '
            f'for i in 1 2 3 4; do head -c 8M /dev/urandom > /tmp/demo/file$i; done && '
            f'sha256sum /tmp/demo/file* | tee /tmp/demo.sum && umount /tmp/demo && '
            f'echo 3 > /proc/sys/vm/drop_caches && mount {disk} /tmp/demo && '
            f'sha256sum -c /tmp/demo.sum && umount /tmp/demo', timeout=600)
    show(b, f'fio --name=demo --filename={disk} --direct=1 --ioengine=libaio --rw=randrw '
            f'--bs=4k --iodepth=32 --numjobs=2 --offset_increment=64M --size=64M '
            f'--time_based --runtime=10 --group_reporting | grep -E "IOPS|lat \\(usec\\)|err="',
         timeout=300)
    show(b, f'{ctl} -s blk show')
    show(a, f'{ctl} -s blk show')
    show(b, f'{ctl} blk unmap {disk}')
    show(a, f'{ctl} blk export del ram0 && echo 0 > {nullb}/power && rmdir {nullb}')
    for vm in hosts:
        show(vm, 'rmmod ferry_blk')


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--kernel', required=True)
    ap.add_argument('--ferry-ko', required=True)
    ap.add_argument('--ferryctl', required=True)
    args = ap.parse_args()
    out = tempfile.mkdtemp(prefix='ferry-demo.')

    def sample(name):
        return os.path.join(os.path.dirname(args.ferry_ko), f'{name}.ko')

    link = Link()
    hosts = [VM('host-a', args.kernel, out, nics=[(link, 0)], mac_base=0x10),
             VM('host-b', args.kernel, out, nics=[(link, 1)], mac_base=0x20)]
    try:
        for n, vm in enumerate(hosts, 1):
            print(f'booting {vm.name} (QEMU/TCG, 2 vCPUs, 1 GiB)...', flush=True)
            vm.start()
            vm.run(f'ip link set eth0 up && ip addr add 192.0.2.{n}/24 dev eth0')
        for vm in hosts:
            show(vm, 'rdma link add rxe0 type rxe netdev eth0')
            show(vm, f'insmod {args.ferry_ko}')
            # The Rust sample offers the service "echo" the sessions below ask for.
            show(vm, f'insmod {sample("ferry_echo")}')
            show(vm, f'{args.ferryctl} device show')
            show(vm, f'{args.ferryctl} -d device show rxe0')
            show(vm, 'rdma res show pd; rdma res show cq')
            print('(iproute2 before the reordering of enum ib_poll_context shows '
                  'IB_POLL_WORKQUEUE as "SOFTIRQ"; ferryctl shows the real context)')
        show(hosts[1], 'ping -c 2 192.0.2.1')
        show(hosts[0], f'{args.ferryctl} -j -p device show rxe0')
        # A session from B to A's listener, with its channels and counters.
        ctl = args.ferryctl
        show(hosts[0], f'{ctl} listener add 192.0.2.1 port 7471')
        show(hosts[1], f'{ctl} session connect 192.0.2.1 port 7471 service echo channels 2')
        show(hosts[1], f'{ctl} session connect 192.0.2.1 port 7472 service echo || true')
        show(hosts[1], f'sleep 3; {ctl} -d -s session show')
        show(hosts[0], f'{ctl} -d -s session show; {ctl} listener show')
        show(hosts[0], 'rdma res show qp | grep ferry; rdma res show cm_id | grep ferry')
        # The C sample: messages, then zero-copy requests of 4 KiB to 4 MiB,
        # from B to A's service, every byte checked.
        show(hosts[0], f'insmod {sample("ferry_cecho")}; {ctl} service show')
        show(hosts[1], f'insmod {sample("ferry_cecho")} peer=192.0.2.1 port=7471 '
                       f'service=cecho count=200 requests=40 hold=1; '
                       f'dmesg | grep "ferry_cecho: client"')
        show(hosts[1], f'{ctl} -s session show')
        block_device(hosts, ctl, sample)
        for vm in hosts:
            show(vm, 'rmmod ferry_cecho ferry_echo ferry')
        problems = sum((vm.kernel_problems() for vm in hosts), [])
        for p in problems:
            print(p)
        print(f'\nconsoles: {out}')
        return 1 if problems else 0
    except VMError as e:
        print(f'ERROR: {e}', file=sys.stderr)
        print(f'consoles: {out}', file=sys.stderr)
        return 1
    finally:
        for vm in hosts:
            vm.stop()


if __name__ == '__main__':
    sys.exit(main())
