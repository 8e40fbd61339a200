# SPDX-License-Identifier: GPL-2.0
"""Message cases: the samples use ferry's kernel API from Rust and from C."""
import re

from harness import case

PORT = 7472
# The samples' client summary line.
SUMMARY = re.compile(r'client: (\d+) sent, (\d+) echoed, (\d+) wrong, sizes 64\.\.(\d+) bytes, '
                     r'(\d+) channels')


def client_summary(t, vm, module):
    """The last client summary `module` logged: (sent, echoed, wrong, max, channels)."""
    log = vm.run(f'dmesg | grep "{module}: client:" | tail -1').out
    m = SUMMARY.search(log)
    t.require(m is not None, f'{module} logged no client summary: {log!r}')
    return tuple(int(x) for x in m.groups())


@case(timeout=300)
def messages_samples(t):
    """One VM, rxe in loopback: the C sample's client sends 3000 messages of
    every size class (64 B to 64 KiB) through the Rust sample's echo service,
    then the Rust client through the C service; each echo is checked byte for
    byte and against the FNV-1a hash the sender put in it, and the services
    check every message they get."""
    vm = t.vm
    t.net_up(vm, 0, 1)
    t.rxe_add(vm)
    t.insmod(vm, echo=True)
    vm.run(f'{t.ferryctl} listener add 192.0.2.1 port {PORT}')
    count = 3000
    vm.run(f'insmod {t.sample("ferry_cecho")} peer=192.0.2.1 port={PORT} service=echo '
           f'count={count} max_msg=65536', timeout=120 * t.slow)
    sent, echoed, wrong, biggest, channels = client_summary(t, vm, 'ferry_cecho')
    t.eq((sent, echoed, wrong), (count, count, 0), 'C client through the Rust service')
    t.eq(biggest, 65536 - 16, 'largest message: the limit less the header')
    t.check(channels >= 1, f'channels: {channels}')
    # The Rust client through the C service ("cecho"), IPv4 as a number.
    vm.run('rmmod ferry_echo')
    vm.run(f'insmod {t.sample("ferry_echo")} peer_ip4=0xc0000201 port={PORT} c_peer=1 '
           f'count={count} max_msg=65536', timeout=120 * t.slow)
    sent, echoed, wrong, _, _ = client_summary(t, vm, 'ferry_echo')
    t.eq((sent, echoed, wrong), (count, count, 0), 'Rust client through the C service')
    bad = vm.run('dmesg | grep -c "failed its check"', check=False).out.strip()
    t.eq(bad, '0', 'messages that failed the services\' check')
    # Both services closed their sessions: each logged its tally.
    vm.run('rmmod ferry_echo ferry_cecho ferry')
    gone = vm.run('dmesg | grep -E "ferry_c?echo: session [0-9]+ gone"').out
    t.check(f'{count} echoed' in gone, f'services echoed {count}: {gone}')
