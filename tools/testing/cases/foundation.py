# SPDX-License-Identifier: GPL-2.0
"""Foundation cases: ferry tracks RDMA devices and reports them over netlink."""
import json

from harness import case
from ferryvm import sh

FAMILY = 'ferry'
CMD_DEVICE_GET = 1
A_INDEX, A_NAME = 1, 2
A_UNKNOWN = 99


@case(timeout=240)
def kunit(t):
    """ferry's and ferry_blk's KUnit suites, run at load after rxe0 exists;
    each case counts."""
    vm = t.vm
    t.rxe_add(vm)
    t.insmod(vm)
    vm.run(f'insmod {t.sample("ferry_blk")}')
    results = t.kunit_results(vm, 'ferry_')
    t.require(results, 'no KUnit results from ferry (was it built with the KUnit cfg?)')
    t.require(any(name.startswith('ferry_blk_') for name, *_ in results),
              'no KUnit results from ferry_blk')
    t.subresults += results
    vm.run('rmmod ferry_blk ferry')


def sysfs(vm, path):
    return vm.run(f'cat {path}').out.strip()


def ibv_devinfo(vm, dev):
    """ibv_devinfo -v as a dict of the device's limits (userspace view)."""
    out = vm.run(f'ibv_devinfo -v -d {dev}').out
    caps = {}
    for line in out.splitlines():
        parts = line.split(':', 1)
        key = parts[0].strip()
        if len(parts) == 2 and (key.startswith('max_') or key in ('active_mtu', 'phys_port_cnt')):
            try:
                caps[key] = int(parts[1].split()[0], 0)
            except ValueError:
                pass
    return caps


@case(timeout=240)
def device_show(t):
    """ferryctl -j device show lists rxe0 with attributes that match rdma, sysfs
    and ibv_devinfo, and its PD and CQ appear under "ferry" in rdma res."""
    vm = t.vm
    t.rxe_add(vm)
    t.insmod(vm)
    devs = t.ferryctl_json(vm)
    t.require(len(devs) == 1, f'want one device, got {devs}')
    d = devs[0]
    rdev = json.loads(vm.run('rdma -j dev show rxe0').out)[0]
    rlink = json.loads(vm.run('rdma -j link show rxe0/1').out)[0]
    t.eq(d['name'], 'rxe0', 'name')
    t.eq(d['index'], rdev['ifindex'], 'index vs rdma dev show')
    t.eq(d['node_guid'], rdev['node_guid'], 'node_guid vs rdma dev show')
    t.eq(d['node_type'], rdev['node_type'], 'node_type vs rdma dev show')
    t.eq(d['node_guid'], sysfs(vm, '/sys/class/infiniband/rxe0/node_guid'), 'node_guid vs sysfs')
    # sysfs: "1: CA"
    t.eq(d['node_type'], sysfs(vm, '/sys/class/infiniband/rxe0/node_type').split()[-1].lower(),
         'node_type vs sysfs')
    t.require(len(d['ports']) == 1, f'ports: {d["ports"]}')
    p = d['ports'][0]
    t.eq(p['port'], rlink['port'], 'port number')
    t.eq(p['state'], rlink['state'], 'port state vs rdma link show')
    t.eq(p['physical_state'], rlink['physical_state'], 'physical state vs rdma link show')
    t.eq(p['netdev'], rlink['netdev'], 'netdev vs rdma link show')
    t.eq(p['state'], sysfs(vm, '/sys/class/infiniband/rxe0/ports/1/state').split()[-1], 'state vs sysfs')
    t.eq(p['link_layer'], sysfs(vm, '/sys/class/infiniband/rxe0/ports/1/link_layer').lower(),
         'link layer vs sysfs')
    t.eq(p['gid_tbl_len'], int(vm.run('ls /sys/class/infiniband/rxe0/ports/1/gids | wc -l').out),
         'gid table length vs sysfs')
    caps = ibv_devinfo(vm, 'rxe0')
    t.eq(p['active_mtu'], caps.get('active_mtu'), 'active MTU vs ibv_devinfo')
    t.eq(p['max_mtu'], caps.get('max_mtu'), 'largest MTU vs ibv_devinfo')
    t.eq(len(d['ports']), caps.get('phys_port_cnt'), 'port count vs ibv_devinfo')
    for key in ('max_qp', 'max_qp_wr', 'max_cq', 'max_cqe', 'max_mr', 'max_pd'):
        t.eq(d['caps'][key], caps.get(key), f'{key} vs ibv_devinfo')
    t.eq(d['caps']['max_send_sge'], caps.get('max_sge'), 'max_send_sge vs ibv_devinfo max_sge')
    t.check(d['num_comp_vectors'] >= 1, f'completion vectors: {d["num_comp_vectors"]}')
    # ferry's PD, attributed to ferry by resource tracking; no CQ before a
    # channel needs one (each channel has its own).
    pds = [x for x in json.loads(vm.run('rdma -j res show pd').out) if x.get('comm') == 'ferry']
    cqs = [x for x in json.loads(vm.run('rdma -j res show cq').out) if x.get('comm') == 'ferry']
    t.eq([x['pdn'] for x in pds], [d['pd']['id']], 'ferry PDs in rdma res show pd')
    t.eq(cqs, [], 'ferry CQs in rdma res show cq with no session')
    t.check('cqs' not in d, f'no device CQ: {d.get("cqs")}')
    # Text output and a single-device query agree with the dump.
    text = vm.run(f'{t.ferryctl} device show rxe0').out
    t.check(text.startswith(f'{d["index"]}: rxe0: node_type ca node_guid {d["node_guid"]}'),
            f'text output: {text!r}')
    t.eq(t.ferryctl_json(vm, 'device show rxe0'), devs, 'device show rxe0 vs dump')
    t.eq(t.ferryctl_json(vm, f'device show index {d["index"]}'), devs, 'device show index vs dump')
    vm.run('rmmod ferry')
    left = [x for x in json.loads(vm.run('rdma -j res show pd').out)
            + json.loads(vm.run('rdma -j res show cq').out) if x.get('comm') == 'ferry']
    t.eq(left, [], 'ferry resources after rmmod')


@case(timeout=240)
def device_hotplug(t):
    """rdma link delete removes a device from ferry with no warning; a second rxe
    device on a second NIC, added later, appears."""
    vm = t.vm
    t.rxe_add(vm, 'rxe0', 0)
    t.insmod(vm)
    t.eq([d['name'] for d in t.ferryctl_json(vm)], ['rxe0'], 'devices at load')
    t.rxe_add(vm, 'rxe1', 1)
    devs = t.ferryctl_json(vm)
    t.eq([d['name'] for d in devs], ['rxe0', 'rxe1'], 'devices after adding rxe1')
    t.check(devs[0]['node_guid'] != devs[1]['node_guid'], 'the two devices have distinct GUIDs')
    t.eq([d['ports'][0]['netdev'] for d in devs], ['eth0', 'eth1'], 'netdevs')
    vm.run('rdma link delete rxe0')
    t.eq([d['name'] for d in t.ferryctl_json(vm)], ['rxe1'], 'devices after deleting rxe0')
    r = vm.run(f'{t.ferryctl} device show rxe0', check=False)
    t.eq(r.rc, 2, 'exit code for a deleted device')
    t.check('no RDMA device with this name' in r.err, f'error for a deleted device: {r.err!r}')
    res = json.loads(vm.run('rdma -j res show pd').out) + json.loads(vm.run('rdma -j res show cq').out)
    t.eq(sorted({x['ifname'] for x in res if x.get('comm') == 'ferry'}), ['rxe1'],
         'devices holding ferry resources')
    # A rename shows at once, and the device answers to its new name only.
    vm.run('rdma dev set rxe1 name rxe9')
    t.eq([d['name'] for d in t.ferryctl_json(vm)], ['rxe9'], 'devices after renaming rxe1')
    t.eq([d['name'] for d in t.ferryctl_json(vm, 'device show rxe9')], ['rxe9'], 'lookup by new name')
    t.eq(vm.run(f'{t.ferryctl} device show rxe1', check=False).rc, 2, 'lookup by old name')
    vm.run('rdma dev set rxe9 name rxe1')
    # Adding it back works, under the module that is still loaded.
    t.rxe_add(vm, 'rxe0', 0)
    t.eq(sorted(d['name'] for d in t.ferryctl_json(vm)), ['rxe0', 'rxe1'], 'devices after re-adding rxe0')
    vm.run('rmmod ferry')
    t.check('rxe0: removed' in vm.run('dmesg').out, 'ferry logged the removal')


def nl(t, vm, *requests):
    """Sends device-get requests, each (flags, attr...), in one nlraw run;
    returns the kernel's answers in order."""
    args = ' -- '.join(' '.join(sh(a) for a in req) for req in requests)
    lines = vm.run(f'{t.nlraw} {FAMILY} {CMD_DEVICE_GET} {args}').out.splitlines()
    t.require(len(lines) == len(requests), f'{len(lines)} answers to {len(requests)} requests')
    return [json.loads(x) for x in lines]


@case(timeout=240)
def netlink_malformed(t):
    """Malformed device-get requests each get the expected errno and an extack
    naming the attribute; ferry keeps answering good requests."""
    vm = t.vm
    t.rxe_add(vm)
    t.insmod(vm)
    EINVAL, ENODEV = 22, 19
    cases = [
        # (what, attrs, errno, bad attr, missing attr, message part)
        ('no attribute at all', [], EINVAL, None, A_NAME, 'Missing attribute'),
        ('name of 64 characters', [f'{A_NAME}:str:' + 'x' * 64], EINVAL, A_NAME, None,
         'failed policy validation'),
        ('name without NUL', [f'{A_NAME}:raw:72786530'], EINVAL, A_NAME, None, ''),
        ('empty name', [f'{A_NAME}:raw:'], EINVAL, A_NAME, None, ''),
        ('index of two bytes', [f'{A_INDEX}:u16:0'], EINVAL, A_INDEX, None, ''),
        ('index of eight bytes', [f'{A_INDEX}:u64:0'], EINVAL, A_INDEX, None, ''),
        ('unknown attribute', [f'{A_UNKNOWN}:u32:1'], EINVAL, A_UNKNOWN, None, 'Unknown attribute'),
        ('attribute length past the message', [f'{A_INDEX}:len=200:00000000'], EINVAL, None, None, ''),
        ('unknown device name', [f'{A_NAME}:str:nope0'], ENODEV, A_NAME, None,
         'no RDMA device with this name'),
        ('unknown device index', [f'{A_INDEX}:u32:4242'], ENODEV, A_INDEX, None,
         'no RDMA device with this index'),
        ('index and name of different devices', [f'{A_INDEX}:u32:4242', f'{A_NAME}:str:rxe0'],
         ENODEV, None, None, 'no RDMA device has this index and name'),
    ]
    # The bad requests, then good ones: by name and as a dump.
    answers = nl(t, vm, *[['do'] + attrs for _, attrs, *_ in cases],
                 ['do', f'{A_NAME}:str:rxe0'], ['dump'])
    for (what, attrs, errno, bad, missing, msg), r in zip(cases, answers):
        t.log(f'{what}: {r}')
        t.eq(r['errno'], errno, f'{what}: errno')
        t.check(r['msg'], f'{what}: no extack message ({r})')
        if msg:
            t.check(msg in (r['msg'] or ''), f'{what}: message {r["msg"]!r} lacks {msg!r}')
        if bad is not None:
            t.eq(r['bad_attr'], bad, f'{what}: offending attribute')
        if missing is not None:
            t.eq(r['missing_attr'], missing, f'{what}: missing attribute')
    # Still serving, by name and as a dump.
    good, dump = answers[-2:]
    t.eq((good['errno'], good['replies']), (0, 1), 'a good request after the bad ones')
    t.eq((dump['errno'], dump['replies']), (0, 1), 'a dump after the bad requests')
    # ferryctl reports the kernel's extack, naming the attribute, with exit 2.
    r = vm.run(f'{t.ferryctl} device show {"x" * 64}', check=False)
    t.eq(r.rc, 2, 'ferryctl exit code for an oversized name')
    t.check(r.err.startswith('Error: ') and '"name"' in r.err, f'ferryctl error: {r.err!r}')
    r = vm.run(f'{t.ferryctl} device show index 4242', check=False)
    t.eq(r.rc, 2, 'ferryctl exit code for an unknown index')
    t.check('no RDMA device with this index' in r.err and '"index"' in r.err,
            f'ferryctl error: {r.err!r}')
    r = vm.run(f'{t.ferryctl} device show index x', check=False)
    t.eq(r.rc, 1, 'ferryctl exit code for a usage error')
    vm.run('rmmod ferry')


@case(timeout=240)
def module_lifecycle(t):
    """ferryctl says when ferry is not loaded; rmmod with devices is clean and
    leaves no resource behind; the module loads again afterwards."""
    vm = t.vm
    r = vm.run(f'{t.ferryctl} device show', check=False)
    t.eq(r.rc, 2, 'exit code without the module')
    t.check('module is not loaded' in r.err, f'message without the module: {r.err!r}')
    # No device yet: ferry loads and lists nothing.
    t.insmod(vm)
    t.eq(t.ferryctl_json(vm), [], 'devices with no RDMA device')
    t.rxe_add(vm, 'rxe0', 0)
    t.rxe_add(vm, 'rxe1', 1)
    t.eq(len(t.ferryctl_json(vm)), 2, 'devices after adding two')
    for _ in range(3):
        vm.run('rmmod ferry')
        t.eq(vm.run('grep -c "^ferry " /proc/modules', check=False).out.strip(), '0', 'module gone')
        res = json.loads(vm.run('rdma -j res show pd').out) + json.loads(vm.run('rdma -j res show cq').out)
        t.eq([x for x in res if x.get('comm') == 'ferry'], [], 'ferry resources after rmmod')
        t.insmod(vm)
        t.eq(sorted(d['name'] for d in t.ferryctl_json(vm)), ['rxe0', 'rxe1'], 'devices after reload')
    vm.run('rmmod ferry')
    r = vm.run(f'{t.ferryctl} device show', check=False)
    t.eq(r.rc, 2, 'exit code after rmmod')


@case(topology='pair', timeout=420)
def two_hosts(t):
    """Two VMs on one link: each tracks its own rxe0, RDMA traffic crosses the
    link, and a VM killed and booted again comes back with ferry working."""
    a, b = t.pair_up()
    ga = t.ferryctl_json(a)[0]['node_guid']
    gb = t.ferryctl_json(b)[0]['node_guid']
    t.check(ga != gb, f'distinct GUIDs on the two hosts ({ga}, {gb})')
    # Real RDMA traffic between the hosts (RC pingpong over rxe).
    srv = 'ibv_rc_pingpong -d rxe0 -g 1 -n 100 -s 4096'
    a.run(f'({srv} > /tmp/pp.log 2>&1 &)')
    r = b.wait_for(f'ibv_rc_pingpong -d rxe0 -g 1 -n 100 -s 4096 192.0.2.1', timeout=60, interval=1)
    t.check('iters in' in r.out + r.err, f'pingpong output: {r}')
    # B crashes; A's ferry does not care; B boots again and works.
    b.kill()
    t.eq([d['name'] for d in t.ferryctl_json(a)], ['rxe0'], 'A after B died')
    b.start()
    t.net_up(b, 0, 2)
    t.rxe_add(b)
    t.insmod(b)
    t.eq([d['name'] for d in t.ferryctl_json(b)], ['rxe0'], 'B after restart')
    b.wait_for('ping -c1 -W1 192.0.2.1', timeout=30)
    for vm in (a, b):
        vm.run('rmmod ferry')


@case(timeout=300)
def netns_isolation(t):
    """ferry shows each network namespace what ib_core lets it use: every device
    in shared mode, only its own in exclusive mode; a namespace's keys go with
    it."""
    vm = t.vm
    t.rxe_add(vm)
    t.insmod(vm)
    ctl = t.ferryctl
    vm.run('ip netns add other')

    def names(ns=None):
        prefix = f'ip netns exec {ns} ' if ns else ''
        ferry = [d['name'] for d in json.loads(vm.run(f'{prefix}{ctl} -j device show').out)]
        rdma = [d['ifname'] for d in json.loads(vm.run(f'{prefix}rdma -j dev show').out)]
        return ferry, rdma

    ferry, rdma = names('other')
    t.eq(ferry, ['rxe0'], 'devices seen from another namespace in shared mode')
    t.eq(ferry, rdma, 'ferry and rdma agree in shared mode')
    # A key belongs to its namespace, and does not keep it: when the
    # namespace goes, its key goes with it.
    vm.run(f'head -c 32 /dev/urandom | base64 | ip netns exec other {ctl} key add k1')
    t.eq(vm.run(f'{ctl} key show').out.strip(), '', 'no key seen from init_net')
    vm.run('dmesg -C')
    vm.run('ip netns del other')
    vm.wait_for('dmesg | grep -q "a network namespace went: 1 keys"', timeout=30 * t.slow)
    vm.run('ip netns add other')
    t.eq(vm.run(f'ip netns exec other {ctl} key show').out.strip(), '',
         'a new namespace starts without keys')
    # Exclusive mode: the mode can change only while init_net is the only one.
    vm.run('ip netns del other && rdma system set netns exclusive && ip netns add other')
    ferry, rdma = names('other')
    t.eq(ferry, [], 'devices seen from another namespace in exclusive mode')
    t.eq(ferry, rdma, 'ferry and rdma agree in exclusive mode')
    r = vm.run(f'ip netns exec other {ctl} device show rxe0', check=False)
    t.eq(r.rc, 2, 'lookup of a device of another namespace')
    t.check('no RDMA device with this name' in r.err, f'error: {r.err!r}')
    r = json.loads(vm.run(f'ip netns exec other {t.nlraw} {FAMILY} {CMD_DEVICE_GET} do '
                          f'{A_INDEX}:u32:0').out)
    t.eq(r['errno'], 19, 'lookup by index from another namespace')
    ferry, rdma = names()
    t.eq(ferry, ['rxe0'], 'devices seen from init_net in exclusive mode')
    vm.run('ip netns del other && rdma system set netns shared')
    vm.run('rmmod ferry')
