# SPDX-License-Identifier: GPL-2.0
"""The hostile peer: tools/testing/hostile/ferry_hostile.c breaks the protocol
on purpose (test builds of ferry only), and its victim must cope."""
import re

from harness import case

PORT = 7473

# Fault number (include/ferry/ferry_test.h) and what the victim must log.
MESSAGE_FAULTS = {
    1: 'a message of unknown kind',
    2: 'a header whose length is not what arrived',
    3: 'credits beyond the buffers it has',
    4: 'a response to no request in flight',
    5: 'a malformed request',
    9: 'a message beyond the largest agreed',
}
RQ_SUMMARY = re.compile(r'client: (\d+) requests, (\d+) done, (\d+) wrong, (\d+) failed')


def echo_sessions(t, vm):
    return [s for s in t.ferryctl_json(vm, 'service show') if s['name'] == 'echo'][0]['sessions']


@case(timeout=900)
def hostile_peer(t):
    """One VM, rxe in loopback. While a well-behaved client holds a session
    to the Rust echo service, a hostile client opens sessions to it and
    sends a message of unknown kind, a header whose length lies, a credit
    grant beyond its buffers, a response to a request never made, a request
    whose data length lies, and a message larger than the largest agreed
    (which the receive buffer's inline room would hold). Each time the service side logs what the
    peer did wrong and closes that session alone: the good session never
    goes down and the service goes on serving. Then a hostile service RDMAs
    into a requester's pages with a forged key (4 KiB, then 1 MiB, which
    rdma_rw splits into several work requests), with the key of a request
    already over, and with the right key just past the region: the
    requester's adapter refuses, its requests fail with an error, its
    registrations are gone, and the attacker's log has the device's status.
    Last, the test build plays a driver that posts a chain of work requests
    only in part: a request's registrations without its send (fault 11),
    then a 1 MiB transfer's work requests without the last (fault 12). The
    side that posted fails its connection, and the request or transfer ends
    once, with an error, after the drain; no region is left."""
    vm = t.vm
    t.net_up(vm, 0, 1)
    t.rxe_add(vm)
    t.insmod(vm, echo=True)
    vm.run(f'{t.ferryctl} listener add 192.0.2.1 port {PORT}')
    mr_base = vm.run('rdma res show mr | wc -l').out.strip()
    cecho, hostile = t.sample('ferry_cecho'), t.sample('ferry_hostile')
    vm.run(f'insmod {cecho} peer=192.0.2.1 port={PORT} service=echo count=100 hold=1',
           timeout=120 * t.slow)
    good = [s for s in t.ferryctl_json(vm, 'session show') if s['role'] == 'client']
    t.require(len(good) == 1, f'one good client session: {good}')
    good_id = good[0]['id']
    t.eq(echo_sessions(t, vm), 1, 'echo sessions before the attacks')

    for n, what in MESSAGE_FAULTS.items():
        r = vm.run(f'insmod {hostile} peer=192.0.2.1 port={PORT} service=echo fault={n}',
                   timeout=60 * t.slow, check=False)
        line = vm.run('dmesg | grep "ferry_hostile: fault" | tail -1').out.strip()
        t.check(r.rc == 0, f'fault {n}: the victim did not close the connection: {line}')
        if r.rc == 0:
            vm.run('rmmod ferry_hostile')
            t.log(line.split('] ', 1)[-1])
        logged = vm.run(f'dmesg | grep -c "the peer broke the protocol ({what}"',
                        check=False).out.strip()
        t.check(logged != '0', f'fault {n}: the victim did not log "{what}"')
        # The attacker's session is closed on the service's side too.
        t.until(lambda: echo_sessions(t, vm) == 1, 30 * t.slow,
                f'fault {n}: the attacker\'s session closed on the service\'s side')

    # A driver that takes a request's registrations and refuses its send
    # (the test build plays it): the requester's own connection fails, and
    # its request ends once, with an error, after the drain.
    cut = 'a chain of send requests was posted only in part'
    r = vm.run(f'insmod {hostile} peer=192.0.2.1 port={PORT} service=echo fault=11',
               timeout=60 * t.slow, check=False)
    line = vm.run('dmesg | grep "ferry_hostile: fault 11: the request" | tail -1').out.strip()
    t.check(r.rc == 0, f'fault 11: the connection did not fail, or the request did not end once '
            f'with an error: {line}')
    if r.rc == 0:
        vm.run('rmmod ferry_hostile')
        t.log(line.split('] ', 1)[-1])
    t.check(vm.run(f'dmesg | grep -c "{cut}"', check=False).out.strip() == '1',
            'fault 11: the requester logged the chain posted in part')
    t.until(lambda: echo_sessions(t, vm) == 1, 30 * t.slow,
            'fault 11: the requester\'s session closed on the service\'s side')

    # The good session never noticed, and the service still serves.
    s = [s for s in t.ferryctl_json(vm, 'session show') if s['id'] == good_id]
    t.require(len(s) == 1, f'the good session is gone: {s}')
    t.eq((s[0]['state'], s[0]['reconnects']), ('connected', 0), 'the good session')
    vm.run('rmmod ferry_cecho')
    vm.run(f'insmod {cecho} peer=192.0.2.1 port={PORT} service=echo count=300',
           timeout=120 * t.slow)
    vm.run('rmmod ferry_cecho')

    # A hostile service: forged keys, then stale ones. 1 MiB takes rdma_rw
    # several work requests; the first one fails, and the device's status for
    # it must still reach the attacker's log (the others are flushed).
    page, mib = 'rq_max=4096', 'rq_min=1048576 rq_max=1048576'

    def count(pattern):
        return int(vm.run(f'dmesg | grep -c {pattern!r}', check=False).out)

    def access_errors():
        return count('remote access error')

    for fault, label, extra in ((6, 'forged key', page), (6, 'forged key, 1 MiB', mib),
                                (7, 'stale key', f'{page} rq_window=1'),
                                (8, 'beyond the region', page)):
        logged = access_errors()
        # rxe's own word on each failed send completion it makes that is not
        # a flush (on the attacker's QP: its forged WRITE).
        refused = count('make_send_cqe: non-flush error')
        vm.run(f'insmod {hostile} serve=1 fault={fault}')
        r = vm.run(f'insmod {cecho} peer=192.0.2.1 port={PORT} service=hostile count=0 '
                   f'requests=2 rq_dir=2 {extra}', timeout=120 * t.slow,
                   check=False)
        if extra == mib:
            # The victim's adapter refuses the first WRITE, and the victim
            # closes the connection. If the attacker's adapter completed that
            # WRITE with its status before the close reached the attacker,
            # the status must be in the attacker's log; if the close came
            # first, the adapter flushed every WRITE and had none to give.
            # Once the attacker's session is gone, its QP was drained and
            # every completion handled.
            t.until(lambda: not [x for x in t.ferryctl_json(vm, 'session show')
                                 if x.get('service') == 'hostile'],
                    10 * t.slow, f'{label}: the attacker\'s session closed')
            # (rxe rate-limits that line: a suppressed one counts as given.)
            gave = (count('make_send_cqe: non-flush error') > refused
                    or count('callbacks suppressed') > 0)
            t.log(f'{label}: the adapter gave a status: {gave}')
            t.check(not gave or access_errors() > logged,
                    f'{label}: the attacker logged the status its adapter gave')
        t.check(r.rc != 0, f'{label}: the requests succeeded')
        m = RQ_SUMMARY.search(vm.run('dmesg | grep "ferry_cecho: client:" | tail -1').out)
        t.require(m is not None, f'{label}: no request summary')
        # (The hostile service writes zeros, not the pattern: a request it
        # completes counts as wrong.)
        sent, done, wrong, failed = (int(x) for x in m.groups())
        t.check(done == sent == 2 and failed >= 1,
                f'{label}: {sent} sent, {done} done, {failed} failed, {wrong} wrong')
        t.log(f'{label}: {sent} requests, {failed} failed with an error, all completed')
        vm.run('rmmod ferry_hostile')
        t.eq(vm.run('rdma res show mr | wc -l').out.strip(), mr_base,
             f'{label}: MRs back to the baseline')

    # A driver that takes all of a transfer's work requests but its last
    # (1 MiB: several): the service fails its connection, the transfer ends
    # after the drain (with an error), and the requests fail.
    cuts = count(cut)
    vm.run(f'insmod {hostile} serve=1 fault=12')
    r = vm.run(f'insmod {cecho} peer=192.0.2.1 port={PORT} service=hostile count=0 '
               f'requests=2 rq_dir=2 {mib}', timeout=120 * t.slow, check=False)
    t.check(r.rc != 0, 'fault 12: the requests succeeded')
    m = RQ_SUMMARY.search(vm.run('dmesg | grep "ferry_cecho: client:" | tail -1').out)
    t.require(m is not None, 'fault 12: no request summary')
    sent, done, wrong, failed = (int(x) for x in m.groups())
    t.check(done == sent == 2 and failed >= 1,
            f'fault 12: {sent} sent, {done} done, {failed} failed, {wrong} wrong')
    t.check(count(cut) == cuts + 1, 'fault 12: the service logged the chain posted in part')
    ended = vm.run('dmesg | grep "ferry_hostile: transfer done:" | tail -2').out
    t.check(re.search(r'transfer done: -\d+', ended) is not None,
            f'fault 12: the cut transfer ended with an error: {ended}')
    t.log(f'fault 12: {sent} requests, {failed} failed with an error, all completed')
    vm.run('rmmod ferry_hostile')
    t.eq(vm.run('rdma res show mr | wc -l').out.strip(), mr_base,
         'fault 12: MRs back to the baseline')
    vm.run('rmmod ferry_echo ferry')
