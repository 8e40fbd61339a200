#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""`make demo`: boots two VMs joined by one Ethernet link, gives each a
soft-RoCE device, loads ferry and shows what ferryctl reports on both, then
opens a session from one to the other (and one to a port nobody listens on)."""
import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ferryvm import VM, Link, VMError  # noqa: E402


def show(vm, cmd):
    print(f'\n[{vm.name}]# {cmd}')
    r = vm.run(cmd, check=False)
    sys.stdout.write(r.out)
    sys.stdout.write(r.err)
    if r.rc != 0:
        raise VMError(f'{vm.name}: "{cmd}" failed with {r.rc}')


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
