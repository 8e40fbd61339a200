# SPDX-License-Identifier: GPL-2.0
"""Session cases: listeners, connects, refusals, recovery."""
import json

from harness import case

PORT = 7471


def sessions(t, vm, role=None):
    out = t.ferryctl_json(vm, '-d session show')
    return [s for s in out if role is None or s['role'] == role]


def ferryctl(t, vm, args, check=True):
    return vm.run(f'{t.ferryctl} {args}', check=check)


def loopback(t):
    vm = t.vm
    t.net_up(vm, 0, 1)
    t.rxe_add(vm)
    t.insmod(vm)
    return vm


@case(timeout=240)
def session_loopback(t):
    """One VM, rxe in loopback: a listener, a 2-channel session to it over
    IPv4 and over IPv6, both sides connected with credits and RTT; disconnect
    closes both sides."""
    vm = loopback(t)
    for addr in ('192.0.2.1', '2001:db8:0::1'):
        ferryctl(t, vm, f'listener add {addr} port {PORT}')
    for addr in ('192.0.2.1', '2001:db8::1'):
        s = json.loads(ferryctl(t, vm, f'-j session connect {addr} port {PORT} service echo '
                                       f'channels 2 heartbeat-ms 200').out)[0]
        t.eq(s['state'], 'connected', f'client state to {addr}')
        t.eq(len(s['channel_list']), 2, 'channels')
        vm.run('sleep 1')
        srv = [x for x in sessions(t, vm, 'server') if x['session_id'] == s['session_id']]
        t.require(len(srv) == 1, f'one server session for {s["session_id"]}: {sessions(t, vm)}')
        t.eq(srv[0]['state'], 'connected', 'server state')
        cl = [x for x in sessions(t, vm, 'client') if x['id'] == s['id']][0]
        t.check(cl['rtt_us'] > 0, f'RTT measured: {cl}')
        t.check(cl['credits'] > 0, f'credits: {cl}')
        ferryctl(t, vm, f'session disconnect id {s["id"]}')
        vm.run('sleep 1')
        left = [x for x in sessions(t, vm) if x['session_id'] == s['session_id']]
        t.eq(left, [], f'sessions after disconnect from {addr}')
    vm.run('rmmod ferry')
