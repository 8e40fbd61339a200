# SPDX-License-Identifier: GPL-2.0
"""ferry_blk cases: a block device exported by the target and mapped back
as /dev/ferryblkN by the client, in one VM over rxe in loopback, and
between two hosts (`blk_two_hosts`)."""
import json
import time

from ferryvm import ROOT
from harness import case
from messages import early_answers

PORT = 7473
MIB = 1 << 20


def blk_modules(t, vm):
    """rxe, ferry and ferry_blk loaded, and a listener."""
    t.net_up(vm, 0, 1)
    t.rxe_add(vm)
    t.insmod(vm)
    vm.run(f'insmod {t.sample("ferry_blk")}')
    vm.run(f'{t.ferryctl} listener add 192.0.2.1 port {PORT}')


def blk_setup(t, vm, size_mib=64):
    """`blk_modules`, and a loop device of `size_mib` MiB on a (sparse)
    file in memory: returns the loop device."""
    blk_modules(t, vm)
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


def slow_io_timeout(t, vm, disk):
    """On a slow kernel, stretches the disk's `io_timeout` (30 s) as every
    other wait: the debug kernel moves well under 1 MB/s through rxe, and a
    queue of large writes there takes longer than 30 s to drain (blk-mq
    would time them out, and the client reset its channel)."""
    if t.slow > 1:
        vm.run(f'echo {30000 * t.slow} > /sys/block/{disk.removeprefix("/dev/")}/queue/io_timeout')


def export_and_map(t, vm, name, dev, how='', export_how=''):
    """Exports `dev` as `name` (`export_how`: more of the export command)
    and maps it back (`how`: more of the map command): the disk's path,
    once it is there."""
    vm.run(f'{t.ferryctl} blk export add {name} path {dev} {export_how}'.rstrip())
    m = t.ferryctl_json(vm, f'blk map 192.0.2.1 port {PORT} export {name} {how}'.rstrip())
    disk = '/dev/' + m[0]['disk']
    vm.wait_for(f'test -b {disk}', timeout=30)
    slow_io_timeout(t, vm, disk)
    return disk


def monitor_start(t, vm):
    """Starts `ferryctl -j monitor` in the background (ferry_blk loaded)."""
    # (No sign says it has joined the group: time enough, on a slow kernel too.)
    vm.run(f'({t.ferryctl} -j monitor > /tmp/mon.log 2>&1 &) ; sleep {2 * t.slow}')


def monitor_stop(vm):
    """Stops the monitor: the events it printed (dicts), in order."""
    vm.run('sleep 1; pkill -f "[f]erryctl -j monitor"; sleep 0.5')
    out = vm.run('cat /tmp/mon.log; rm -f /tmp/mon.log').out
    return [json.loads(line) for line in out.splitlines() if line.startswith('{')]


def blk_events(events):
    """The ferry_blk events among `events`: (event, name or disk, sectors,
    state)."""
    return [(e['event'], e.get('name', e.get('disk')), e.get('sectors'), e.get('state'))
            for e in events if e['event'].startswith('blk-')]


@case(timeout=300)
def blk_map_verify(t):
    """A loop device is exported and mapped back over ferry: the disk's
    size, block sizes, read-only flag and discard limits (`lsblk -D`) agree
    with the export's, 32 MiB of random data written through the disk
    (direct I/O, 1 MiB and 4 KiB writes) read back identical, and the
    target's device holds the same bytes (sha256 on both sides); the target
    counted the writes and lists its client (session and address). The
    client's session takes no requests: its channels' memory (`mem_bytes`)
    holds no room for them, and its server's no room for sending any.
    Exporting a device in use is refused with EBUSY, and so are unmapping
    an open disk and unloading the module while a disk is mapped; then the
    mapping goes, and unloading the module closes the export left. A RAM
    disk (brd)
    exported and mapped the same way holds what the client wrote to it."""
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
    slow_io_timeout(t, vm, disk)
    for what in ('--getsz', '--getss', '--getpbsz', '--getro'):
        t.eq(vm.run(f'blockdev {what} {disk}').out.strip(),
             vm.run(f'blockdev {what} {loop}').out.strip(), f'blockdev {what}')
    lsblk = 'lsblk -D -b -n -o DISC-ALN,DISC-GRAN,DISC-MAX,DISC-ZERO'
    t.eq(vm.run(f'{lsblk} {disk}').out.split(), vm.run(f'{lsblk} {loop}').out.split(),
         'lsblk -D (alignment, granularity, maximum, zeroes)')
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
    # Reads are answered right behind their data (the target's session).
    early = [s for s in t.ferryctl_json(vm, '-s session show')
             if s['role'] == 'server'][0]['stats']['early_answers']
    t.log(f'{export["stats"]["reads"]} reads, {early} answered right behind their data')
    t.check(0 < early <= export['stats']['reads'], f'reads answered with their data: {early}')
    t.eq(export['users'], 1, 'sessions using the export')
    server = [x for x in t.ferryctl_json(vm, 'session show') if x['role'] == 'server']
    t.eq([(c['session'], c['addr'], c['read_only']) for c in export['clients']],
         [(server[0]['id'], '192.0.2.1', False)], 'the export\'s client: its session and address')
    # The client takes no requests (FERRY_NO_REQUESTS): its channels keep
    # no responder entries and its receive buffers no inline room (a 4 KiB
    # message each, where its send buffers take the inline 4 KiB too), and
    # the server's send buffers none either. (The server's entries: one per
    # request in flight, and an eighth more for reads answered right behind
    # their data.)
    for s in t.ferryctl_json(vm, '-s session show'):
        d = s['queue_depth']
        want = {'client': d * (4096 + 8192),
                'server': d * (8192 + 4096) + (d + early_answers(d)) * 8192}[s['role']]
        got = [c.get('mem_bytes') for c in s['channel_list']]
        t.log(f'{s["role"]} session: depth {d}, mem_bytes per channel {got}')
        t.eq(got, [want] * 2, f'{s["role"]} channels\' memory')
    r = vm.run('rmmod ferry_blk', check=False)
    t.check(r.rc != 0 and 'in use' in r.err, f'unloading ferry_blk with a disk mapped: {r}')
    # (The target answers an operation just before it stops counting it.)
    t.until(lambda: sorted((x['kind'], x['inflight']) for x in show(t, vm)) == [('export', 0), ('map', 0)],
            10 * t.slow, 'no operation in flight once idle, on either side')
    # Open, it cannot be unmapped.
    r = vm.run(f'exec 3<{disk}; {t.ferryctl} blk unmap {disk}; rc=$?; exec 3<&-; exit $rc',
               check=False)
    t.check(r.rc == 2 and 'open' in r.err, f'unmapping an open disk: {r.rc} {r.err!r}')
    r = vm.run(f'{t.ferryctl} blk export del ram0', check=False)
    t.check(r.rc == 2 and 'mapped' in r.err, f'deleting a mapped export: {r.rc} {r.err!r}')
    vm.run(f'{t.ferryctl} blk unmap {disk}')
    # An export left does not keep the module: unloading closes it.
    vm.run('rmmod ferry_blk')
    t.check('export ram0: closed (ferry_blk unloads)' in vm.run('dmesg').out,
            'unloading closed the export left')
    vm.run(f'insmod {t.sample("ferry_blk")}')
    t.eq(show(t, vm), [], 'nothing left after the reload')
    # A RAM disk (brd) as the backing disk: what the client writes is on it.
    size = min(int(vm.run('blockdev --getsize64 /dev/ram1').out), 32 * MIB)
    disk = export_and_map(t, vm, 'brd1', '/dev/ram1')
    vm.run(f'dd if=/dev/shm/pattern of={disk} bs=64k count={size // 65536} '
           f'oflag=direct status=none')
    want = sha(vm, '/dev/shm/pattern', size)
    vm.run('echo 3 > /proc/sys/vm/drop_caches')
    t.eq((sha(vm, disk, size), sha(vm, '/dev/ram1', size)), (want, want),
         f'{size} bytes on a RAM disk, through the client and on the target')
    vm.run(f'{t.ferryctl} blk unmap {disk}')
    vm.run(f'{t.ferryctl} blk export del brd1')
    vm.run('blkdiscard /dev/ram1')
    vm.run('rm -f /dev/shm/pattern')
    blk_teardown(t, vm, loop)


FIO_SIZES = (('512', 512), ('4k', 4096), ('64k', 65536), ('1m', MIB), ('4m', 4 * MIB))


def fio_mib(t):
    """MiB each fio job writes: 16, so that a block size gets 64 MiB from
    two jobs at two depths (a 512 B write at depth 1 is a round trip through
    rxe under TCG: 16 MiB of them take minutes), or 2 on the debug kernel
    (under TCG with KASAN it is some twenty times slower, and there for its
    reports: with 4, the 512 B steps alone took 1630 s)."""
    return 2 if t.slow > 1 else 16


def whole_blocks(mib, size):
    """`mib` rounded up to whole blocks of `size` bytes (fio writes no part
    of a block)."""
    step = max(1, size // MIB)
    return -(-mib // step) * step


def fio(t, vm, disk, bs, qd, verify_only=False, mib=None, engine='libaio'):
    """fio with crc32c verification of random writes of `bs` at depth `qd`,
    two jobs on disjoint ranges of `mib` MiB (`fio_mib`'s by default); with
    `verify_only`, the separate pass that reads back what the writes left.
    `engine`: fio's ioengine and its options. Returns (bytes written, bytes
    verified)."""
    mib = mib or fio_mib(t)
    cmd = (f'fio --name=v --filename={disk} --direct=1 --ioengine={engine} --rw=randwrite '
           f'--bs={bs} --iodepth={qd} --numjobs=2 --size={mib}M --offset_increment={mib}M '
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
    queue depths 1 and 32, two jobs on disjoint ranges: 64 MiB per block
    size, 16 of them at depth 1 and 48 at depth 32 (an eighth on the debug
    kernel, in whole blocks: 4 MiB blocks take 8 MiB at each depth); each
    run is read back in a separate verifying pass (at depth 32); the
    target's device and the disk hold the same bytes (sha256)."""
    vm = t.vm
    loop = blk_setup(t, vm, size_mib=96)
    disk = export_and_map(t, vm, 'v0', loop, 'channels 2')
    largest = int(vm.run(f'cat /sys/block/{disk.removeprefix("/dev/")}/queue/max_sectors_kb').out)
    t.check(largest * 1024 < 4 * MIB, f'a 4 MiB write is split: the disk takes {largest} KiB')
    total = 0
    for name, size in FIO_SIZES:
        # A quarter of the block size's bytes at depth 1, the rest at 32: at
        # depth 1 a 512 B write is a round trip through rxe under TCG. (A
        # job writes whole blocks: 4 MiB at either depth on the debug
        # kernel.)
        for qd, mib in ((1, whole_blocks(fio_mib(t) // 2, size)),
                        (32, whole_blocks(fio_mib(t) * 3 // 2, size))):
            start = time.monotonic()
            written, verified = fio(t, vm, disk, name, qd, mib=mib)
            mid = time.monotonic()
            # The separate pass reads at depth 32 whatever depth wrote: the
            # same blocks, checked the same way.
            _, again = fio(t, vm, disk, name, 32, verify_only=True, mib=mib)
            t.log(f'bs {name} qd {qd}: {written} bytes written, {verified} verified '
                  f'({mid - start:.0f} s), {again} verified again ({time.monotonic() - mid:.0f} s)')
            want = 2 * mib * MIB
            t.check(written >= want and verified >= want and again >= want,
                    f'bs {name} qd {qd}: too few bytes ({written}, {verified}, {again})')
            total += verified + again
    t.log(f'{total} bytes verified in all')
    vm.run('echo 3 > /proc/sys/vm/drop_caches')
    # (The jobs wrote the first 2 x 24 MiB at most.)
    t.eq(sha(vm, disk, 64 * MIB), sha(vm, loop, 64 * MIB), 'sha256 of the disk and the export')
    st = [x for x in show(t, vm) if x['kind'] == 'export'][0]['stats']
    t.log(f'target counted: {st}')
    t.eq(st['failed'], 0, 'failed operations on the target')
    vm.run(f'{t.ferryctl} blk unmap {disk}')
    vm.run(f'{t.ferryctl} blk export del v0')
    blk_teardown(t, vm, loop)


@case(timeout=400)
def blk_submission(t):
    """Where the target submits: reads and writes from where they arrive
    (ferry's completion work), as bios that must not wait, so that a loop
    device (which takes them) with room for every request defers none of
    fio's 4 KiB reads and writes at depth 1. A null_blk device with one tag
    that holds each request 1 ms cannot take 16 writes at once: those that
    would wait for its tag end in EAGAIN, are deferred to ferry_blk's work
    queue and submitted again there, and fio verify (crc32c) ends clean,
    with the same bytes on both sides. Discards are always deferred."""
    vm = t.vm
    loop = blk_setup(t, vm, size_mib=64)
    disk = export_and_map(t, vm, 's0', loop, 'channels 2')
    vm.run(f'fio --name=qd1 --filename={disk} --direct=1 --ioengine=libaio --rw=randrw '
           f'--bs=4k --iodepth=1 --size=8M --io_size=4M --output=/dev/null', timeout=300 * t.slow)
    st = export_stats(t, vm, 's0')
    t.log(f'loop device, fio randrw at depth 1: {st["reads"]} reads, {st["writes"]} writes, '
          f'{st["deferred"]} deferred')
    t.check(st['reads'] > 0 and st['writes'] > 0, f'fio read and wrote: {st}')
    t.eq(st['deferred'], 0, 'operations deferred with a tag free for each')
    vm.run(f'{t.ferryctl} blk unmap {disk}')
    vm.run(f'{t.ferryctl} blk export del s0')

    # (Held 1 ms, times the kernel's slowness: longer than a submission
    # takes, on the debug kernel too.)
    slow = nullb(vm, 'ferry_onetag', size=32, submit_queues=1, hw_queue_depth=1, irqmode=2,
                 completion_nsec=1000000 * t.slow)
    disk = export_and_map(t, vm, 's1', slow, 'channels 2')
    written, verified = fio(t, vm, disk, '4k', 16, mib=4)
    vm.run(f'blkdiscard -o 0 -l 1M {disk}')
    st = export_stats(t, vm, 's1')
    t.log(f'one-tag null_blk, fio verify at depth 16: {written} bytes written, {verified} '
          f'verified; {st["writes"]} writes, {st["discards"]} discards, {st["deferred"]} deferred')
    t.check(written >= 8 * MIB and verified >= 8 * MIB, f'fio moved too little: {written}, {verified}')
    t.check(st['deferred'] > st['discards'] >= 1,
            f'writes that would wait for the tag were deferred: {st}')
    t.eq(st['failed'], 0, 'failed operations on the target')
    vm.run('echo 3 > /proc/sys/vm/drop_caches')
    t.eq(sha(vm, disk, 8 * MIB), sha(vm, slow, 8 * MIB), 'sha256 of the disk and the export')
    vm.run(f'{t.ferryctl} blk unmap {disk}')
    vm.run(f'{t.ferryctl} blk export del s1')
    nullb_del(vm, 'ferry_onetag')
    blk_teardown(t, vm, loop)


def channel_counts(t, vm):
    """Per channel of the client's session: (requests sent, completions
    its consumer polled)."""
    s = [x for x in t.ferryctl_json(vm, '-s -d session show') if x['role'] == 'client']
    return [(c['stats']['requests_tx'], c['stats']['polled']) for c in s[0]['channel_list']]


@case(timeout=400)
def blk_poll_queues(t):
    """A disk mapped with `channels 2 poll-queues 1` has three hardware
    queues, the last polled (`io_poll` 1), and says so in `blk show`. fio
    verifies (crc32c) random writes through io_uring with
    IORING_SETUP_IOPOLL (`--hipri`) at depths 1 and 16: all of it goes on
    the polled channel, the third, whose completions the submitter
    processes (its `polled` count grows by at least half the requests: the
    rest a tick's idle poll may have taken); libaio's I/O, which does not
    poll, goes on the other two alone. The target's device holds what was
    written. A mapping asking for 64 polled queues, or for 64 channels and
    one polled queue, is refused with a clear error; one asking for more
    polled queues than CPUs gets one per CPU. The client's other channels
    process their completions in softirq, the target's on ib_comp_wq."""
    vm = t.vm
    loop = blk_setup(t, vm, size_mib=64)
    vm.run(f'{t.ferryctl} blk export add p0 path {loop}')
    for how, what in (('poll-queues 64', 'policy'), ('channels 64 poll-queues 1', 'at most 64')):
        r = vm.run(f'{t.ferryctl} blk map 192.0.2.1 port {PORT} export p0 {how}', check=False)
        t.log(f'map {how}: rc {r.rc}, {r.err.strip()!r}')
        t.check(r.rc == 2 and 'poll-queues' in r.err and (what == 'policy' or what in r.err),
                f'map {how} refused: {r.rc} {r.err!r}')
    t.eq([x for x in show(t, vm) if x['kind'] == 'map'], [], 'no mapping made by a refused map')
    # More polled queues than CPUs: cut to one per online CPU, as nvme's.
    cpus = int(vm.run('nproc').out)
    m = t.ferryctl_json(vm, f'blk map 192.0.2.1 port {PORT} export p0 channels 1 poll-queues {cpus + 3}')
    t.eq((m[0]['channels'], m[0]['poll_queues']), (1, cpus), f'poll-queues {cpus + 3} on {cpus} CPUs')
    vm.wait_for(f'test -b /dev/{m[0]["disk"]}', timeout=30)
    t.eq(vm.run(f'ls /sys/block/{m[0]["disk"]}/mq').out.split(), [str(q) for q in range(1 + cpus)],
         'hardware queues of the cut mapping')
    vm.run(f'{t.ferryctl} blk unmap /dev/{m[0]["disk"]}')
    m = t.ferryctl_json(vm, f'blk map 192.0.2.1 port {PORT} export p0 channels 2 poll-queues 1')
    t.eq((m[0]['channels'], m[0]['poll_queues']), (2, 1), 'the mapping\'s queues, and polled ones')
    disk = '/dev/' + m[0]['disk']
    name = m[0]['disk']
    vm.wait_for(f'test -b {disk}', timeout=30)
    slow_io_timeout(t, vm, disk)
    t.check(f'queues 2 poll-queues 1' in vm.run(f'{t.ferryctl} blk show').out,
            'blk show names the queues')
    t.eq(vm.run(f'cat /sys/block/{name}/queue/io_poll').out.strip(), '1', 'io_poll')
    t.eq(vm.run(f'ls /sys/block/{name}/mq').out.split(), ['0', '1', '2'], 'hardware queues')
    before = channel_counts(t, vm)
    t.eq(len(before), 3, 'client channels')
    # ferry_blk's client asks for softirq completions (FERRY_SOFTIRQ), as
    # nvme-rdma's host queues; its polled channel's nobody but blk-mq polls.
    ctx = {s['role']: [c['cq']['poll_ctx'] for c in s['channel_list']]
           for s in t.ferryctl_json(vm, '-s -d session show')}
    t.eq(ctx, {'client': ['softirq', 'softirq', 'direct'], 'server': ['workqueue'] * 3},
         'CQ poll contexts of the client and the target')
    written = verified = 0
    # (preadv2's RWF_HIPRI no longer polls: since Linux 5.16 only io_uring
    # does.)
    for engine, qd in (('io_uring --hipri', 1), ('io_uring --hipri', 16)):
        w, v = fio(t, vm, disk, '4k', qd, mib=4, engine=engine)
        t.log(f'{engine} qd {qd}: {w} bytes written, {v} verified')
        t.check(w >= 8 * MIB and v >= 8 * MIB, f'{engine}: too few bytes ({w}, {v})')
        written += w
        verified += v
    polled = channel_counts(t, vm)
    t.log(f'per channel (requests, polled completions): {before} -> {polled}')
    ios = (written + verified) // 4096
    sent = polled[2][0] - before[2][0]
    t.check(sent >= ios, f'polled I/O on the polled channel: {sent} requests for {ios} I/Os')
    # (Not one of fio's: a stray read, as a probe of the new disk's, may.)
    stray = sum(a[0] - b[0] for a, b in zip(polled[:2], before[:2]))
    t.check(stray <= 16, f'requests on the other channels while only polled I/O ran: {stray}')
    t.check(polled[2][1] - before[2][1] >= ios // 2,
            f'completions the submitters polled: {polled[2][1] - before[2][1]} for {ios} I/Os')
    w, v = fio(t, vm, disk, '64k', 8, mib=4)
    after = channel_counts(t, vm)
    t.log(f'after libaio: {after}')
    t.eq(after[2], polled[2], 'the polled channel while libaio (not polled) ran')
    sent = sum(a[0] - b[0] for a, b in zip(after[:2], polled[:2]))
    t.check(sent >= (w + v) // 65536, f'libaio\'s requests on the other channels: {sent}')
    vm.run('echo 3 > /proc/sys/vm/drop_caches')
    t.eq(sha(vm, disk, 16 * MIB), sha(vm, loop, 16 * MIB), 'sha256 of the disk and the export')
    vm.run(f'{t.ferryctl} blk unmap {disk}')
    vm.run(f'{t.ferryctl} blk export del p0')
    blk_teardown(t, vm, loop)


FILESYSTEMS = (('ext4', 'mkfs.ext4 -q -F', 'e2fsck -fn'), ('xfs', 'mkfs.xfs -q -f', 'xfs_repair -n'))


@case(timeout=400)
def blk_filesystem(t):
    """ext4, then XFS, on a mapped disk: made, mounted, files written and
    synced, unmounted, checked clean (`e2fsck -fn`, `xfs_repair -n`),
    mounted again with every file's sha256 unchanged. The target counted
    the filesystems' flushes (the loop device has a write cache)."""
    vm = t.vm
    # XFS wants 300 MiB at least; the file is sparse.
    loop = blk_setup(t, vm, size_mib=320)
    disk = export_and_map(t, vm, 'fs0', loop)
    vm.run('mkdir -p /tmp/fb')
    for fs, mkfs, fsck in FILESYSTEMS:
        vm.run(f'{mkfs} {disk}', timeout=120 * t.slow)
        vm.run(f'mount -t {fs} {disk} /tmp/fb')
        vm.run('for i in $(seq 1 20); do head -c $((i * 100000)) /dev/urandom > /tmp/fb/f$i; done; '
               'mkdir /tmp/fb/d && cp /tmp/fb/f1* /tmp/fb/d/ && sync', timeout=120 * t.slow)
        before = vm.run('cd /tmp/fb && sha256sum f* d/*').out
        vm.run('umount /tmp/fb')
        r = vm.run(f'{fsck} {disk}', check=False, timeout=120 * t.slow)
        t.eq(r.rc, 0, f'{fsck}: {(r.out + r.err)[-300:]!r}')
        vm.run(f'mount -t {fs} {disk} /tmp/fb')
        t.eq(vm.run('cd /tmp/fb && sha256sum f* d/*').out, before, f'{fs}: files after a remount')
        vm.run('umount /tmp/fb')
        st = [x for x in show(t, vm) if x['kind'] == 'export'][0]['stats']
        t.log(f'{fs}: target counted {st}')
    t.check(st['flushes'] > 0, f'no flush reached the target: {st}')
    vm.run(f'{t.ferryctl} blk unmap {disk}')
    vm.run(f'{t.ferryctl} blk export del fs0')
    blk_teardown(t, vm, loop)


def nullb(vm, name, **attrs):
    """A memory-backed null_blk device of 64 MiB made through configfs with
    `attrs` besides: returns its path."""
    vm.run('mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config')
    d = f'/sys/kernel/config/nullb/{name}'
    attrs = {'size': 64, 'memory_backed': 1, 'discard': 1, **attrs}
    sets = ' && '.join(f'echo {v} > {d}/{k}' for k, v in attrs.items())
    vm.run(f'mkdir {d} && {sets} && echo 1 > {d}/power')
    # A device made through configfs takes the name of its directory.
    return f'/dev/{name}'


def nullb_del(vm, name):
    vm.run(f'echo 0 > /sys/kernel/config/nullb/{name}/power && '
           f'rmdir /sys/kernel/config/nullb/{name}')


def export_stats(t, vm, name):
    return [x for x in show(t, vm) if x['kind'] == 'export' and x['name'] == name][0]['stats']


def grew(before, after, key):
    return after[key] - before[key]


def backing_flushes(vm, dev):
    """Flushes the block device `dev`'s driver completed (its stat file)."""
    return int(vm.run(f'cat /sys/block/{dev.removeprefix("/dev/")}/stat').out.split()[15])


@case(timeout=400)
def blk_operations(t):
    """Every operation, counted on the target, over two null_blk exports:
    one with a write cache and FUA, one with neither. Both disks map with a
    volatile write cache and FUA (as nvmet's controllers report, whatever
    the device): the client always sends flushes and FUA, and the target's
    block layer ends them at once where the device has no cache. So a cache
    turned on after the export (the first device's was off when exported,
    as `write_cache` in sysfs or a dm table reload may change it) still gets
    every flush: `fio --fsync=1` reaches the target as one flush per write,
    and the device; `fio --sync=1` as FUA writes.
    `blkdiscard -z` becomes WRITE_ZEROES and `blkdiscard` DISCARD, both
    counted, and the range reads back zeros; `fstrim` on ext4 discards. A
    bad block of the backing disk fails the I/O that touches it with EIO
    and nothing else: the blocks around it read, and the session never
    reconnects."""
    vm = t.vm
    blk_modules(t, vm)
    cached = nullb(vm, 'fbc', cache_size=16, fua=1)
    plain = nullb(vm, 'fbp')
    vm.run('echo "write through" > /sys/block/fbc/queue/write_cache')
    vm.run(f'{t.ferryctl} blk export add c0 path {cached}')
    vm.run(f'{t.ferryctl} blk export add p0 path {plain}')
    c = t.ferryctl_json(vm, f'blk map 192.0.2.1 port {PORT} export c0 channels 2')[0]['disk']
    p = t.ferryctl_json(vm, f'blk map 192.0.2.1 port {PORT} export p0')[0]['disk']
    for disk in (c, p):
        vm.wait_for(f'test -b /dev/{disk}', timeout=30)
        slow_io_timeout(t, vm, disk)
        t.eq(vm.run(f'cat /sys/block/{disk}/queue/write_cache').out.strip(), 'write back',
             f'{disk}: write cache')
        t.eq(vm.run(f'cat /sys/block/{disk}/queue/fua').out.strip(), '1', f'{disk}: FUA')
    # The cache of the first device on, after it was exported.
    vm.run('echo "write back" > /sys/block/fbc/queue/write_cache')
    n = 256
    # Each measured alone: O_SYNC writes flush too (the block layer's
    # fsync after each), so the flushes are counted on the fsync run.
    for name, disk, backing in (('c0', c, cached), ('p0', p, plain)):
        got = {}
        for flag, key in (('--fsync=1', 'flushes'), ('--sync=1', 'fua')):
            before = export_stats(t, vm, name)
            flushed = backing_flushes(vm, backing)
            r = vm.run(f'fio --name=s --filename=/dev/{disk} --direct=1 --ioengine=psync '
                       f'--rw=randwrite --bs=4k --number_ios={n} --size=16M {flag} '
                       f'--output-format=json', timeout=120 * t.slow)
            iops = json.loads(r.out[r.out.index('{'):])['jobs'][0]['write']['iops']
            got[key] = grew(before, export_stats(t, vm, name), key)
            got[f'device flushes in the {key} run'] = backing_flushes(vm, backing) - flushed
            got[f'{key} iops'] = round(iops)
        t.log(f'{name}: {got}')
        # (fio's last fsync goes with its close: one fewer is seen.)
        t.check(got['flushes'] >= n - 1, f'{name}: too few flushes {got}')
        t.check(got['fua'] >= n, f'{name}: too few FUA writes {got}')
        if name == 'c0':
            t.check(got['device flushes in the flushes run'] >= n - 1,
                    f'{name}: the flushes reached the device its cache was turned on in: {got}')
    # Zeroes and discards, each over 8 MiB of random data.
    zero = f'cmp -n {8 * MIB} /dev/zero'
    for cmd, key, bytes_key, at in (('blkdiscard -z', 'write_zeroes', 'bytes_zeroed', 16),
                                    ('blkdiscard', 'discards', 'bytes_discarded', 32)):
        vm.run(f'head -c {8 * MIB} /dev/urandom | dd of=/dev/{c} bs=1M seek={at} oflag=direct '
               f'status=none')
        before = export_stats(t, vm, 'c0')
        vm.run(f'{cmd} -o {at * MIB} -l {8 * MIB} /dev/{c}')
        after = export_stats(t, vm, 'c0')
        t.log(f'{cmd}: {key} +{grew(before, after, key)}')
        t.check(grew(before, after, key) > 0, f'{cmd}: no {key} counted: {after}')
        t.eq(grew(before, after, bytes_key), 8 * MIB, f'{cmd}: {bytes_key} counted')
        r = vm.run(f'dd if=/dev/{c} bs=1M skip={at} count=8 iflag=direct status=none | {zero}',
                   check=False)
        t.eq(r.rc, 0, f'{cmd}: the range reads back zeros ({r.out.strip()})')
    vm.run(f'mkfs.ext4 -q -F -E nodiscard /dev/{c} && mkdir -p /tmp/fb && mount /dev/{c} /tmp/fb')
    vm.run('head -c 20000000 /dev/urandom > /tmp/fb/big && sync && rm /tmp/fb/big && sync')
    before = export_stats(t, vm, 'c0')
    r = vm.run('fstrim -v /tmp/fb')
    after = export_stats(t, vm, 'c0')
    t.log(f'{r.out.strip()}: discards +{grew(before, after, "discards")}')
    t.check(grew(before, after, 'discards') > 0, f'fstrim: no discard counted: {after}')
    vm.run('umount /tmp/fb')
    # A bad block: sectors 4096-4103 (the 4 KiB at 2 MiB).
    vm.run(f'dd if=/dev/urandom of=/dev/{c} bs=1M count=4 oflag=direct status=none')
    vm.run('echo +4096-4103 > /sys/kernel/config/nullb/fbc/badblocks')
    before = export_stats(t, vm, 'c0')
    r = vm.run(f'dd if=/dev/{c} of=/dev/null bs=4k skip=512 count=1 iflag=direct', check=False)
    t.check(r.rc != 0 and 'Input/output error' in r.err, f'reading a bad block: {r}')
    vm.run(f'dd if=/dev/{c} of=/dev/null bs=4k count=512 iflag=direct status=none')
    vm.run(f'dd if=/dev/{c} of=/dev/null bs=4k skip=513 count=511 iflag=direct status=none')
    after = export_stats(t, vm, 'c0')
    t.check(grew(before, after, 'backing_errors') >= 1, f'no backing error counted: {after}')
    vm.run('echo -4096-4103 > /sys/kernel/config/nullb/fbc/badblocks')
    vm.run(f'dd if=/dev/{c} of=/dev/null bs=4k skip=512 count=1 iflag=direct status=none')
    sessions = [s for s in t.ferryctl_json(vm, 'session show') if s['role'] == 'client']
    t.check(all(s.get('reconnects', 0) == 0 and s['state'] == 'connected' for s in sessions),
            f'a session reconnected: {sessions}')
    m = [x for x in show(t, vm) if x['kind'] == 'map' and x['disk'] == c][0]
    t.log(f'client counted: {m["stats"]}')
    for d in (c, p):
        vm.run(f'{t.ferryctl} blk unmap /dev/{d}')
    vm.run(f'{t.ferryctl} blk export del c0 && {t.ferryctl} blk export del p0')
    vm.run('rmmod ferry_blk')
    nullb_del(vm, 'fbc')
    nullb_del(vm, 'fbp')
    vm.run('rmmod ferry')


def fio_background(t, vm, disk, log):
    """Starts fio in the background on `disk`: mixed 4 KiB to 256 KiB reads
    and writes at depth 16, for 2 minutes (times the kernel's slowness: it
    must still run when the case removes the disk under it, which takes the
    debug kernel over a minute to get to); its output goes to `log`."""
    vm.run(f'(fio --name=bg --filename={disk} --direct=1 --ioengine=libaio --rw=randrw '
           f'--bsrange=4k-256k --iodepth=16 --numjobs=2 --size=32M --time_based '
           f'--runtime={120 * t.slow} > {log} 2>&1; echo $? > {log}.rc) >/dev/null 2>&1 &')
    name = disk.removeprefix('/dev/')

    # (The disk's partitions were read when it was added: fio writes.)
    def busy():
        m = [x for x in show(t, vm) if x['kind'] == 'map' and x['disk'] == name][0]['stats']
        return m['writes'] > 0
    t.until(busy, 30 * t.slow, f'fio writing to {disk}')


def fio_ended(t, vm, log):
    """Waits for the background fio to end (it must not hang): its exit code."""
    t.until(lambda: vm.run(f'test -s {log}.rc', check=False).rc == 0, 60 * t.slow,
            'fio ended after the forced removal')
    return int(vm.run(f'cat {log}.rc').out.strip())


def dd_background(vm, src, disk, args):
    """Starts `dd if=src of=disk args oflag=direct` in the background; its
    exit code goes to /tmp/dd.rc (see `dd_ended`)."""
    vm.run(f'(dd if={src} of={disk} {args} oflag=direct status=none; '
           f'echo $? > /tmp/dd.rc) >/dev/null 2>&1 &')


def dd_ended(t, vm, timeout, what):
    """Waits for `dd_background`'s dd to end: its exit code."""
    t.until(lambda: vm.run('test -s /tmp/dd.rc', check=False).rc == 0, timeout, what)
    return int(vm.run('cat /tmp/dd.rc').out.strip())


@case(timeout=300)
def blk_forced(t):
    """Forced removal under load. A disk is unmapped by force while fio
    does reads and writes on it at depth 32: the command returns, fio ends
    at once with I/O errors, the disk is gone and the target's export has
    no user. Then an export is deleted by force under fio on its client:
    the client's I/O fails, fio ends, the mapping shows the export gone and
    unmaps; nothing hangs and, on the debug kernel, nothing leaks."""
    vm = t.vm
    loop = blk_setup(t, vm)
    disk = export_and_map(t, vm, 'f0', loop, 'channels 2')
    fio_background(t, vm, disk, '/tmp/fio1.log')
    t.until(lambda: [x for x in show(t, vm) if x['kind'] == 'map'][0]['inflight'] > 0,
            30 * t.slow, 'the mapping counting requests in flight under fio')
    r = vm.run(f'{t.ferryctl} blk unmap {disk}', check=False)
    t.require(r.rc == 2 and 'open' in r.err, f'unmapping a disk in use without force: {r}; '
              f'fio: {vm.run("pgrep -a fio; tail -5 /tmp/fio1.log", check=False).out!r}')
    vm.run(f'timeout {30 * t.slow} {t.ferryctl} blk unmap {disk} force')
    rc = fio_ended(t, vm, '/tmp/fio1.log')
    t.log(f'fio after the forced unmap: rc {rc}, '
          f'{vm.run("grep -m1 -i error /tmp/fio1.log", check=False).out.strip()!r}')
    t.check(rc != 0, 'fio saw no error on a disk unmapped under it')
    t.until(lambda: vm.run(f'test -b {disk}', check=False).rc != 0, 30 * t.slow, 'the disk gone')
    t.until(lambda: [x for x in show(t, vm) if x['kind'] == 'export'][0]['users'] == 0,
            30 * t.slow, 'the export without users')
    # The export deleted by force under its client's load.
    disk = '/dev/' + t.ferryctl_json(vm, f'blk map 192.0.2.1 port {PORT} export f0 channels 2')[0]['disk']
    vm.wait_for(f'test -b {disk}', timeout=30)
    slow_io_timeout(t, vm, disk)
    fio_background(t, vm, disk, '/tmp/fio2.log')
    monitor_start(t, vm)
    r = vm.run(f'{t.ferryctl} blk export del f0', check=False)
    t.check(r.rc == 2 and 'mapped' in r.err, f'deleting a mapped export without force: {r}')
    vm.run(f'timeout {30 * t.slow} {t.ferryctl} blk export del f0 force')
    rc = fio_ended(t, vm, '/tmp/fio2.log')
    t.log(f'fio after the forced export del: rc {rc}')
    t.check(rc != 0, 'fio saw no error on a disk whose export was deleted under it')
    # (Whether the mapping's own counter of failed requests moved is a race:
    # the target's notice may reach the client before the answers to the
    # requests it still served, and then every later request ends in the
    # block layer at the dead disk, before the driver. fio's errors above
    # are what a user sees.)
    maps = [x for x in show(t, vm) if x['kind'] == 'map']
    t.log(f'the mapping: {maps}')
    t.check(len(maps) == 1 and maps[0]['state'] == 'dead' and maps[0]['sectors'] == 0,
            f'the mapping after the export went: {maps}')
    vm.run(f'timeout {30 * t.slow} {t.ferryctl} blk unmap {disk}')
    t.eq(show(t, vm), [], 'nothing left')
    # (The client may hear of the deletion before the target's command
    # returns: the first two in either order.)
    events = [e[:1] + e[3:] for e in blk_events(monitor_stop(vm))]
    events[:2] = sorted(events[:2])
    t.eq(events, [('blk-export-del', None), ('blk-map-change', 'dead'), ('blk-map-del', 'dead')],
         'events of the forced export del')
    vm.run('rm -f /tmp/fio1.log* /tmp/fio2.log*')
    blk_teardown(t, vm, loop)


@case(timeout=300)
def blk_hostile_client(t):
    """A hostile client (`ferry_blk_hostile.ko`, test builds only) opens an
    export beside a well-behaved mapping that writes and reads it, and
    sends malformed operations: an unknown handle, a sector beyond the
    capacity, a range that wraps, a length not in whole blocks, a length
    that does not match the data, data on a flush, an unknown op, FUA on a
    read, a write to a read-only open, an unknown version, a short header.
    The target refuses each with the protocol's errno and logs why (rate
    limited), counts them, serves the hostile session's good read after
    them, and the good mapping's data reads back identical, its session
    never reset."""
    vm = t.vm
    loop = blk_setup(t, vm)
    disk = export_and_map(t, vm, 'h0', loop, 'channels 2')
    n = 16 * MIB
    vm.run(f'head -c {n} /dev/urandom > /dev/shm/pattern')
    dd_background(vm, '/dev/shm/pattern', disk, 'bs=64k')
    r = vm.run(f'insmod {t.sample("ferry_blk_hostile")} peer=192.0.2.1 port={PORT} export=h0',
               check=False)
    log = vm.run('dmesg | grep "ferry_blk_hostile:"', check=False).out
    for line in log.splitlines():
        t.log(line.split('] ', 1)[-1])
    t.eq(r.rc, 0, f'the hostile client\'s checks: {r.err.strip()}')
    t.eq(log.count('refused with'), 11, 'malformed operations refused')
    t.check('a good read after them: served' in log, 'the hostile session served after them')
    vm.run('rmmod ferry_blk_hostile')
    t.check('ferry_blk' in vm.run('dmesg | grep -i "refused" | grep -v hostile', check=False).out,
            'the target logged the refusals')
    t.eq(dd_ended(t, vm, 60 * t.slow, 'the good writes'), 0, 'the good mapping\'s writes')
    vm.run('echo 3 > /proc/sys/vm/drop_caches')
    t.eq(sha(vm, disk, n), sha(vm, '/dev/shm/pattern', n), 'the good mapping\'s data')
    st = [x for x in show(t, vm) if x['kind'] == 'export'][0]['stats']
    t.log(f'target counted: {st}')
    # (An unknown handle names no export to count it on.)
    t.check(st['refused'] >= 10, f'refusals counted: {st}')
    client = [s for s in t.ferryctl_json(vm, 'session show') if s['role'] == 'client']
    t.check(len(client) == 1 and client[0].get('reconnects', 0) == 0,
            f'the good mapping\'s session: {client}')
    vm.run(f'{t.ferryctl} blk unmap {disk}')
    vm.run(f'{t.ferryctl} blk export del h0')
    vm.run('rm -f /dev/shm/pattern /tmp/dd.rc')
    blk_teardown(t, vm, loop)


@case(timeout=300)
def blk_hostile_target(t):
    """A hostile target (test builds: an export named `hostile-*` is
    answered wrongly) answers an open a byte short, and with a logical
    block size of 1000: the client refuses each mapping with a clear error,
    logs why, and makes no disk. Another answers right, then sends notices
    of a wrong length, of an unknown kind, and of a capacity too large for
    the block layer: the client ignores each (logged), and its disk keeps
    its capacity and serves I/O."""
    vm = t.vm
    blk_modules(t, vm)
    devs = {name: nullb(vm, f'hs{i}') for i, name in
            enumerate(('hostile-short', 'hostile-bsize', 'hostile-notices'))}
    for name, dev in devs.items():
        vm.run(f'{t.ferryctl} blk export add {name} path {dev}')
    for name in ('hostile-short', 'hostile-bsize'):
        r = vm.run(f'{t.ferryctl} blk map 192.0.2.1 port {PORT} export {name}', check=False)
        t.check(r.rc == 2 and 'malformed' in r.err, f'mapping {name}: {r}')
    t.eq([x for x in show(t, vm) if x['kind'] == 'map'], [], 'no disk of a malformed answer')
    dmesg = vm.run('dmesg').out
    t.eq(dmesg.count("the target's answer to an open is malformed"), 2, 'the client logged why')
    m = t.ferryctl_json(vm, f'blk map 192.0.2.1 port {PORT} export hostile-notices')[0]
    disk = '/dev/' + m['disk']
    vm.wait_for(f'test -b {disk}', timeout=30)
    t.until(lambda: vm.run('dmesg').out.count('ignored a malformed notice') >= 3, 30 * t.slow,
            'the client ignoring three malformed notices')
    t.eq(vm.run(f'blockdev --getsz {disk}').out.strip(), str(64 * MIB // 512),
         'the disk\'s capacity after the notices')
    vm.run(f'head -c {4 * MIB} /dev/urandom > /dev/shm/pattern')
    vm.run(f'dd if=/dev/shm/pattern of={disk} bs=1M oflag=direct status=none')
    t.eq(vm.run(f'dd if={disk} bs=1M count=4 iflag=direct status=none | sha256sum').out,
         vm.run('sha256sum < /dev/shm/pattern').out, 'data on the disk after the notices')
    t.eq([x['state'] for x in show(t, vm) if x['kind'] == 'map'], ['live'], 'the mapping')
    vm.run(f'{t.ferryctl} blk unmap {disk}')
    for name in devs:
        vm.run(f'{t.ferryctl} blk export del {name}')
    vm.run('rmmod ferry_blk; rm -f /dev/shm/pattern')
    for i in range(len(devs)):
        nullb_del(vm, f'hs{i}')
    vm.run('rmmod ferry')


def failed_alone(t, vm, disk, export, dev):
    """After a write that failed for good on `disk` (export `export` of
    null_blk device `dev`): the mapping is up with that one failed write
    and none done, and reads work once the session is back. Then the
    mapping, the export and the modules go."""
    m = [x for x in show(t, vm) if x['kind'] == 'map'][0]
    t.eq((m['state'], m['stats']['failed'], m['stats']['writes']), ('live', 1, 0),
         'the mapping up, one failed write, none done')
    t.until(lambda: vm.run(f'dd if={disk} of=/dev/null bs=4k count=1 iflag=direct status=none',
                           check=False).rc == 0, 60 * t.slow, 'a read once the session is back')
    vm.run(f'{t.ferryctl} blk unmap {disk}')
    vm.run(f'{t.ferryctl} blk export del {export}')
    vm.run('rmmod ferry_blk')
    nullb_del(vm, dev)
    vm.run('rmmod ferry')


@case(timeout=300)
def blk_retry_limit(t):
    """A request whose connection fails under it goes again once the
    session is back, 5 times at most: a hostile target (test builds: an
    export named `hostile-drop`) fails its session under every write and
    never answers it. The client reconnects and sends the write again 5
    times, then fails it with ENOLINK (a transport error, which multipath
    may fail over), alone: the mapping stays up and reads still work."""
    vm = t.vm
    blk_modules(t, vm)
    dev = nullb(vm, 'hd0')
    disk = export_and_map(t, vm, 'hostile-drop', dev)
    before = [s for s in t.ferryctl_json(vm, 'session show') if s['role'] == 'client'][0]
    r = vm.run(f'dd if=/dev/zero of={disk} bs=4k count=1 oflag=direct status=none',
               check=False, timeout=240 * t.slow)
    t.log(f'the write: rc {r.rc}, {r.err.strip()!r}')
    t.check(r.rc != 0 and 'Link has been severed' in r.err, f'the write failed with ENOLINK: {r}')
    after = [s for s in t.ferryctl_json(vm, 'session show') if s['role'] == 'client'][0]
    log = vm.run('dmesg').out
    dropped = log.count('hostile export: failing session')
    resets = [line[line.rindex('('):] for line in log.splitlines()
              if 'hostile export: failing session' in line]
    t.log(f'channels the target reset under each drop: {" ".join(resets)}')
    t.eq([x for x in resets if 'reset: true' not in x], [],
         "drops whose own channel the target could not fail (the write may have been answered EIO)")
    t.log(f'client reconnects {before.get("reconnects", 0)} -> {after.get("reconnects", 0)}; '
          f'the target failed {dropped} sessions under the write')
    t.eq(dropped, 6, 'the write sent once and again 5 times')
    failed_alone(t, vm, disk, 'hostile-drop', 'hd0')


@case(timeout=300)
def blk_timeout_reset(t):
    """blk-mq's timeout resets the connection, as nvme-rdma's does: a
    hostile target (test builds: an export named `hostile-hold`) holds
    every write unanswered while its session stays up. With the disk's
    `io_timeout` at 1 s, the write times out and the client resets its
    channel, once per try; ferry reconnects, and the write goes again on
    each new session, 5 times, then fails with ENOLINK, alone: the mapping
    stays up and reads work."""
    vm = t.vm
    blk_modules(t, vm)
    dev = nullb(vm, 'ho0')
    disk = export_and_map(t, vm, 'hostile-hold', dev)
    vm.run(f'echo 1000 > /sys/block/{disk.removeprefix("/dev/")}/queue/io_timeout')
    before = [s for s in t.ferryctl_json(vm, 'session show') if s['role'] == 'client'][0]
    r = vm.run(f'dd if=/dev/zero of={disk} bs=4k count=1 oflag=direct status=none',
               check=False, timeout=240 * t.slow)
    t.log(f'the write: rc {r.rc}, {r.err.strip()!r}')
    t.check(r.rc != 0 and 'Link has been severed' in r.err, f'the write failed with ENOLINK: {r}')
    log = vm.run('dmesg').out
    held = log.count('hostile export: holding a write')
    resets = log.count(': its channel reset')
    t.log(f'the target held {held} writes; the client timed out and reset {resets} times')
    t.eq((held, resets), (6, 6), 'the write sent once and again 5 times, each held, timed out and reset')
    # (The last reset's reconnect follows the write's failure.)
    reconnects = lambda: [s for s in t.ferryctl_json(vm, 'session show')
                          if s['role'] == 'client'][0].get('reconnects', 0) - before.get('reconnects', 0)
    t.until(lambda: reconnects() == 6, 30 * t.slow, 'a reconnect after each reset')
    failed_alone(t, vm, disk, 'hostile-hold', 'ho0')


@case(timeout=400)
def blk_fence(t):
    """No write of an earlier connection lands after a newer one. A hostile
    target (test builds: an export named `hostile-stall`) keeps the
    export's first write "in the backing disk" until its session has ended
    and 8 s more. With the disk's `io_timeout` at 1 s the client resets the
    connection, reconnects and opens the export again: the target refuses
    that open for now (its log: fenced) until the held write has landed,
    so the write sent again, and a newer write of other data to the same
    block, land after it and read back. fio verify (crc32c) runs on the
    rest of the disk through the fault, and the disk and the target's
    device hold the same bytes."""
    vm = t.vm
    loop = blk_setup(t, vm)
    disk = export_and_map(t, vm, 'hostile-stall', loop, 'channels 2')
    vm.run(f'echo 1000 > /sys/block/{disk.removeprefix("/dev/")}/queue/io_timeout')
    vm.run('head -c 4096 /dev/urandom > /dev/shm/old; head -c 4096 /dev/urandom > /dev/shm/new')
    dd_background(vm, '/dev/shm/old', disk, 'bs=4k count=1')
    t.until(lambda: 'holding a write' in vm.run('dmesg').out, 30 * t.slow,
            'the target holding the first write')
    # Once the write timed out and the client reset the connection, the
    # disk's timeout is long again (fio's requests must not time out).
    t.until(lambda: any(s['role'] == 'client' and s.get('reconnects', 0) >= 1
                        for s in t.ferryctl_json(vm, 'session show')),
            60 * t.slow, 'the client reset and reconnected')
    vm.run(f'echo {30000 * t.slow} > /sys/block/{disk.removeprefix("/dev/")}/queue/io_timeout')
    mib = 8
    fio_verify_background(t, vm, disk, mib, 1, '/tmp/fio.json', offset=1)
    t.eq(dd_ended(t, vm, 120 * t.slow, 'the first write done'), 0, 'the first write\'s exit code')
    # The newer write, at once, to the same block.
    vm.run(f'dd if=/dev/shm/new of={disk} bs=4k count=1 oflag=direct status=none')
    t.until(lambda: 'held write at sector 0 lands now' in vm.run('dmesg').out, 60 * t.slow,
            'the held write landed')
    written, verified = fio_verified(t, vm, '/tmp/fio.json', 300 * t.slow)
    t.log(f'fio: {written} bytes written, {verified} verified')
    t.check(verified >= mib * MIB, f'fio verified {mib} MiB')
    fenced = map_of(t, vm)['stats']['fenced']
    t.log(f'reopens the target refused for now (fenced): {fenced}')
    vm.run('echo 3 > /proc/sys/vm/drop_caches')
    want = sha(vm, '/dev/shm/new', 4096)
    t.eq(sha(vm, loop, 4096), want, 'the newer write on the target\'s device (the stale one landed first)')
    t.eq(sha(vm, disk, 4096), want, 'the newer write read back through the disk')
    t.check(fenced >= 1, 'the target fenced the reopen at least once')
    t.check('ended with 1 operations at work' in vm.run('dmesg').out,
            'the target logged the fence')
    n = (1 + mib) * MIB
    t.eq(sha(vm, disk, n), sha(vm, loop, n), 'sha256 of the disk and the export')
    vm.run(f'{t.ferryctl} blk unmap {disk}')
    vm.run(f'{t.ferryctl} blk export del hostile-stall')
    vm.run('rm -f /dev/shm/old /dev/shm/new /tmp/dd.rc /tmp/fio.json /tmp/fio.json.rc')
    blk_teardown(t, vm, loop)


def fio_verify_background(t, vm, disk, mib, loops, out, offset=0):
    """Starts fio verifying (crc32c, verify_fatal) random 4 KiB writes at
    depth 8 over `mib` MiB of `disk` from `offset` MiB, `loops` times (each
    pass written, then read back and checked), in the background: its JSON
    to `out`, its exit code to `out`.rc."""
    vm.run(f'(fio --name=f --filename={disk} --direct=1 --ioengine=libaio --rw=randwrite '
           f'--bs=4k --iodepth=8 --size={mib}M --offset={offset}M --loops={loops} '
           f'--verify=crc32c --verify_fatal=1 --do_verify=1 --output-format=json '
           f'> {out} 2>&1; echo $? > {out}.rc) >/dev/null 2>&1 &')


def fio_result(t, vm, out, timeout):
    """Waits for `fio_verify_background`'s fio: (exit code, I/O errors,
    bytes written, bytes verified); (rc, -1, 0, 0) if it printed no
    result."""
    t.until(lambda: vm.run(f'test -s {out}.rc', check=False).rc == 0, timeout, 'fio verify ended')
    r = vm.run(f'cat {out}.rc {out}')
    rc = int(r.out.split('\n', 1)[0])
    try:
        job = json.loads(r.out[r.out.index('{'):])['jobs'][0]
    except ValueError:
        t.log(f'fio printed no result: {r.out[-600:]!r}')
        return rc, -1, 0, 0
    return rc, job['error'], job['write']['io_bytes'], job['read']['io_bytes']


def fio_verified(t, vm, out, timeout):
    """Waits for `fio_verify_background`'s fio: (bytes written, bytes
    verified), checked clean."""
    rc, errors, written, verified = fio_result(t, vm, out, timeout)
    t.require((rc, errors) == (0, 0), f'fio verify: exit code {rc}, errors {errors}')
    return written, verified


@case(timeout=400)
def blk_device_readd(t):
    """The target's RDMA device is deleted and added back while a disk is
    mapped and fio verifies on it (6 passes of 16 MiB, 2 on the debug
    kernel; one VM: the client's device too). The listener waits for its
    address and listens again once the device is back; the client
    reconnects and reopens, its requests requeued; fio verify ends clean,
    and the disk and the device hold the same bytes."""
    vm = t.vm
    loop = blk_setup(t, vm)
    disk = export_and_map(t, vm, 'dr0', loop, 'channels 2')
    # (The debug kernel moves well under 1 MB/s: 96 MiB of 4 KiB writes and
    # reads there took over 900 s.)
    mib = 16 if t.slow == 1 else 2
    fio_verify_background(t, vm, disk, mib, 6, '/tmp/fio.json')
    vm.run(f'sleep {2 * t.slow}')
    vm.run('rdma link delete rxe0')
    t.until(lambda: t.ferryctl_json(vm, 'listener show')[0].get('state') == 'waiting',
            10 * t.slow, 'the listener waiting for its address')
    vm.run('sleep 2')
    t.rxe_add(vm)
    back = time.monotonic()
    t.until(lambda: t.ferryctl_json(vm, 'listener show')[0].get('state') == 'listening',
            10 * t.slow, 'the listener listening again')
    t.until(lambda: [x for x in show(t, vm) if x['kind'] == 'map'][0]['state'] == 'live'
            and any(s['role'] == 'client' and s['state'] == 'connected'
                    for s in t.ferryctl_json(vm, 'session show')),
            60 * t.slow, 'the disk back')
    t.log(f'the disk was back {time.monotonic() - back:.1f} s after the device')
    written, verified = fio_verified(t, vm, '/tmp/fio.json', 300 * t.slow)
    t.log(f'fio: {written} bytes written, {verified} verified')
    t.check(verified >= 6 * mib * MIB, f'fio verified 6 x {mib} MiB')
    vm.run('echo 3 > /proc/sys/vm/drop_caches')
    n = mib * MIB
    t.eq(sha(vm, disk, n), sha(vm, loop, n), 'sha256 of the disk and the export')
    vm.run(f'{t.ferryctl} blk unmap {disk}')
    vm.run(f'{t.ferryctl} blk export del dr0')
    vm.run('rm -f /tmp/fio.json /tmp/fio.json.rc')
    blk_teardown(t, vm, loop)


def cut_off(t, vm):
    """The target unreachable for its clients (one VM: the listener removed
    and the server session closed, so every reconnect is refused)."""
    lst = t.ferryctl_json(vm, 'listener show')[0]
    vm.run(f'{t.ferryctl} listener del id {lst["id"]}')
    for s in t.ferryctl_json(vm, 'session show'):
        if s['role'] == 'server':
            vm.run(f'{t.ferryctl} session disconnect id {s["id"]}')


def map_of(t, vm):
    return [x for x in show(t, vm) if x['kind'] == 'map'][0]


def timed_write(t, vm, disk, seek):
    """A 4 KiB direct write at 4 KiB block `seek`: (exit code, seconds)."""
    r = vm.run(f'start=$(date +%s%N); dd if=/dev/urandom of={disk} bs=4k count=1 seek={seek} '
               f'oflag=direct status=none; rc=$?; echo $rc $(( ($(date +%s%N) - start) / 1000000 ))',
               check=False, timeout=120 * t.slow)
    rc, ms = r.out.split()[-2:]
    return int(rc), int(ms) / 1000


def reconnect_waits(vm, mark):
    """The waits between reconnect attempts the kernel log told (ms) since
    `mark` was written to it."""
    out = vm.run('dmesg', check=False).out
    out = out[out.rindex(mark):]
    return [int(line.rsplit('next in ', 1)[1].split()[0])
            for line in out.splitlines() if 'failed (' in line and 'next in ' in line]


@case(timeout=400)
def blk_fast_fail(t):
    """Fail fast, or not at all, with nvme-cli's meanings. A disk mapped
    with `fast-fail 2 give-up 20` whose target becomes unreachable is
    connecting (I/O waits), then failing-fast: a write waiting since the cut
    fails within fast-fail + 5 s, a new one at once, and no task hangs;
    the target back, the disk is live again and takes writes. `blk set`
    changes the times live: with `give-up 3` and no fast-fail, a cut-off
    disk is dead after 3 s, its I/O fails, and it unmaps without force.
    Each state is an event, and `blk show -s` counts reconnects, requeues,
    fast-failed requests and the seconds disconnected. No wait between
    reconnect attempts is longer than the reconnect delay (mapped with 2 s,
    then set to 1 s live)."""
    vm = t.vm
    loop = blk_setup(t, vm)
    disk = export_and_map(t, vm, 'ff0', loop, 'channels 2 fast-fail 2 give-up 20 reconnect-delay 2')
    m = map_of(t, vm)
    t.eq((m['state'], m['fast_fail'], m['give_up'], m['reconnect_delay']), ('live', 2, 20, 2),
         'mapped')
    monitor_start(t, vm)
    vm.run('echo "ferry test: first cut" > /dev/kmsg')
    cut_off(t, vm)
    t.until(lambda: map_of(t, vm)['state'] in ('connecting', 'failing-fast'), 10 * t.slow,
            'the disk connecting')
    rc, secs = timed_write(t, vm, disk, 0)
    t.log(f'a write from the cut on: rc {rc} after {secs:.1f} s (fast-fail 2 s)')
    t.check(rc != 0 and secs < 2 + 5, f'the write failed within fast-fail + 5 s: {rc} {secs}')
    t.eq(map_of(t, vm)['state'], 'failing-fast', 'the state')
    rc, secs = timed_write(t, vm, disk, 1)
    t.log(f'a write while failing fast: rc {rc} after {secs:.2f} s')
    t.check(rc != 0 and secs < 2 * t.slow, f'failed at once: {rc} {secs}')
    vm.run(f'{t.ferryctl} listener add 192.0.2.1 port {PORT}')
    t.until(lambda: map_of(t, vm)['state'] == 'live', 60 * t.slow, 'live again')
    rc, secs = timed_write(t, vm, disk, 2)
    t.eq(rc, 0, 'a write once the target is back')
    waits = reconnect_waits(vm, 'ferry test: first cut')
    t.log(f'waits between reconnect attempts (ms): {waits}')
    t.check(waits and max(waits) <= 2000, 'no wait longer than the reconnect delay (2 s)')
    # Live changes: no fast-fail, give up after 3 s, reconnect within 1 s.
    m = t.ferryctl_json(vm, f'blk set {disk} fast-fail 0 give-up 3 reconnect-delay 1')[0]
    t.eq((m['fast_fail'], m['give_up'], m['reconnect_delay']), (0, 3, 1), 'changed live')
    vm.run('echo "ferry test: second cut" > /dev/kmsg')
    cut_off(t, vm)
    start = time.monotonic()
    t.until(lambda: map_of(t, vm)['state'] == 'dead', 20 * t.slow, 'the disk dead')
    t.log(f'dead {time.monotonic() - start:.1f} s after the cut (give-up 3 s)')
    waits = reconnect_waits(vm, 'ferry test: second cut')
    t.log(f'waits between reconnect attempts (ms): {waits}')
    t.check(waits and max(waits) <= 1000, 'no wait longer than the reconnect delay (1 s)')
    rc, secs = timed_write(t, vm, disk, 3)
    t.check(rc != 0 and secs < 2 * t.slow, f'a write to the dead disk fails at once: {rc} {secs}')
    st = map_of(t, vm)['stats']
    t.log(f'counted: {st}')
    t.check(st['reconnects'] >= 2 and st['fast_failed'] >= 1 and st['disconnected_s'] >= 4,
            f'reconnects, fast-failed requests, seconds disconnected counted: {st}')
    events = [e.get('state') for e in monitor_stop(vm) if e['event'] == 'blk-map-change']
    t.log(f'states told: {events}')
    want = ['connecting', 'failing-fast', 'live', 'connecting', 'dead']
    t.eq([x for i, x in enumerate(events) if i == 0 or events[i - 1] != x], want, 'the states told')
    t.eq(vm.run('dmesg | grep -c "blocked for more than"', check=False).out.strip(), '0',
         'hung tasks')
    vm.run(f'{t.ferryctl} blk unmap {disk}')
    vm.run(f'{t.ferryctl} blk export del ff0')
    blk_teardown(t, vm, loop)


@case(timeout=300)
def blk_notices(t):
    """Notices that find no room are not lost. A hostile target (test
    builds: an export named `hostile-lossy`) loses every notice the first
    time, as a session without room for it would: its one-second tick
    sends it again, and the client's disk takes the new capacity. A deleted
    export's notice is never sent again (the export is gone): the client's
    next request, refused `ENODEV`, kills the disk at once, and every later
    one fails at once."""
    vm = t.vm
    loop = blk_setup(t, vm)
    disk = export_and_map(t, vm, 'hostile-lossy', loop, 'channels 2')
    vm.run('truncate -s 96M /dev/shm/blk0.img')
    vm.run(f'losetup -c {loop}')
    vm.run(f'{t.ferryctl} blk export resize hostile-lossy')
    start = time.monotonic()
    t.until(lambda: map_of(t, vm)['sectors'] == 96 * MIB // 512, 10 * t.slow,
            'the new capacity on the client')
    t.log(f'the resize reached the client {time.monotonic() - start:.1f} s after it was lost')
    log = vm.run('dmesg').out
    t.check('a notice to session' in log and 'told session' in log and 'Resized' in log,
            'the lost notice was sent again')
    vm.run(f'dd if=/dev/urandom of={disk} bs=1M count=1 seek=90 oflag=direct status=none')
    vm.run(f'{t.ferryctl} blk export del hostile-lossy force')
    rc, secs = timed_write(t, vm, disk, 0)
    t.log(f'a write after the deletion: rc {rc} after {secs:.2f} s')
    t.check(rc != 0, 'the write failed')
    t.until(lambda: map_of(t, vm)['state'] == 'dead', 10 * t.slow, 'the disk dead')
    rc, secs = timed_write(t, vm, disk, 1)
    t.check(rc != 0 and secs < 2 * t.slow, f'the next write fails at once: {rc} {secs}')
    vm.run(f'{t.ferryctl} blk unmap {disk}')
    blk_teardown(t, vm, loop)


@case(timeout=300)
def blk_delete_hung(t):
    """A forced `export del` is bounded even with the backing disk hung: a
    write of the export is held "in the backing disk" (`hostile-stall`)
    when the export is deleted by force; the command returns within its
    3 s bound plus a margin, and the client's disk is dead. The device
    stays held by the export until that write has ended (a forced unmap
    ends the client's session, and the write lands 8 s later): then it is
    closed, can be exported again, and ferry_blk unloads."""
    vm = t.vm
    loop = blk_setup(t, vm)
    disk = export_and_map(t, vm, 'hostile-stall', loop)
    dd_background(vm, '/dev/urandom', disk, 'bs=4k count=1')
    t.until(lambda: 'holding a write' in vm.run('dmesg').out, 30 * t.slow,
            'the target holding the write')
    start = time.monotonic()
    vm.run(f'{t.ferryctl} blk export del hostile-stall force', timeout=60 * t.slow)
    took = time.monotonic() - start
    t.log(f'the forced delete returned after {took:.1f} s with the write held')
    t.check(took < 3 + 3 * t.slow, f'within its bound: {took:.1f} s')
    t.check('deleted with 1 operations still at work' in vm.run('dmesg').out, 'logged')
    t.until(lambda: map_of(t, vm)['state'] == 'dead', 10 * t.slow, 'the client\'s disk dead')
    r = vm.run(f'{t.ferryctl} blk export add again path {loop}', check=False)
    t.check(r.rc == 2 and 'in use' in r.err, f'the device still held by the write: {r}')
    vm.run(f'{t.ferryctl} blk unmap {disk} force', timeout=60 * t.slow)
    t.check(dd_ended(t, vm, 30 * t.slow, 'the held write ended on the client') != 0,
            'the write failed on the client')
    t.until(lambda: 'its last operation ended' in vm.run('dmesg').out, 60 * t.slow,
            'the held write landed and the device closed')
    vm.run(f'{t.ferryctl} blk export add again path {loop}')
    vm.run(f'{t.ferryctl} blk export del again')
    vm.run('rm -f /tmp/dd.rc')
    blk_teardown(t, vm, loop)


@case(timeout=300)
def blk_unmap_unreachable(t):
    """A forced unmap is bounded with the target unreachable: a disk (no
    fast-fail, give-up 600 s) whose target cannot be reached has a write
    waiting; `blk unmap` without force is refused, with force it returns
    within a few seconds and the waiting write fails."""
    vm = t.vm
    loop = blk_setup(t, vm)
    disk = export_and_map(t, vm, 'um0', loop)
    cut_off(t, vm)
    t.until(lambda: map_of(t, vm)['state'] == 'connecting', 10 * t.slow, 'the disk connecting')
    dd_background(vm, '/dev/urandom', disk, 'bs=4k count=1')
    vm.run('sleep 1')
    r = vm.run(f'{t.ferryctl} blk unmap {disk}', check=False)
    t.check(r.rc == 2 and 'unreachable' in r.err, f'refused without force: {r}')
    start = time.monotonic()
    vm.run(f'{t.ferryctl} blk unmap {disk} force', timeout=60 * t.slow)
    took = time.monotonic() - start
    t.log(f'the forced unmap took {took:.1f} s with the target unreachable')
    t.check(took < 5 * t.slow, f'within a few seconds: {took:.1f} s')
    t.check(dd_ended(t, vm, 10 * t.slow, 'the waiting write ended') != 0,
            'the waiting write failed')
    vm.run(f'{t.ferryctl} blk export del um0')
    vm.run('rm -f /tmp/dd.rc')
    blk_teardown(t, vm, loop)


UUID = '0123abcd-4567-489a-8bcd-ef0123456789'
RULES = 'tools/udev/60-ferry-blk.rules'


def reexport(t, vm, name, dev, how, reconnected_log):
    """The target's export `name` goes away while its client is cut off
    (the listener removed, the session disconnected) and comes back on
    `dev` (`how`: more of the add command), as after a reload of the
    target's module; then the listener again, and the client reconnects:
    waits for `reconnected_log` in the log."""
    lst = t.ferryctl_json(vm, 'listener show')[0]
    vm.run(f'{t.ferryctl} listener del id {lst["id"]}')
    server = [s for s in t.ferryctl_json(vm, 'session show') if s['role'] == 'server']
    t.require(len(server) == 1, f'one server session: {server}')
    vm.run(f'{t.ferryctl} session disconnect id {server[0]["id"]}')
    # Its session is gone: no client has it open, it goes without force.
    vm.run(f'{t.ferryctl} blk export del {name}')
    vm.run(f'{t.ferryctl} blk export add {name} path {dev} {how}'.rstrip())
    vm.run(f'{t.ferryctl} listener add 192.0.2.1 port {PORT}')
    t.until(lambda: reconnected_log in vm.run('dmesg').out, 60 * t.slow, reconnected_log)


@case(timeout=400)
def blk_identity(t):
    """Every export has an identity, a UUID: given at `export add`, else
    random (a loop device has no ID of its own). `blk show` shows it on both
    sides, the disk in sysfs (`wwid` uuid.UUID, `uuid`), and the udev rule
    makes /dev/disk/by-id/ferryblk-uuid.UUID of it. The target's export goes
    away while the client is cut off and comes back under the same name:
    with the same identity the disk goes on (data intact); with another
    device (another identity) the client refuses it, with a log line, and
    not one request reaches it: its I/O fails, the other device is
    untouched."""
    vm = t.vm
    loop = blk_setup(t, vm)
    vm.run('truncate -s 64M /dev/shm/other.img')
    other = vm.run('losetup -f --show /dev/shm/other.img').out.strip()
    vm.run(f'{t.ferryctl} blk export add plain path {other}')
    plain = [x for x in show(t, vm) if x['kind'] == 'export' and x['name'] == 'plain'][0]
    t.log(f'an export of a device without an ID of its own: {plain["uuid"]}')
    t.check(plain['uuid'][14] == '4' and plain['uuid'] != '00000000-0000-0000-0000-000000000000',
            f'a random (version 4) UUID: {plain}')
    vm.run(f'{t.ferryctl} blk export del plain')
    r = vm.run(f'{t.ferryctl} blk export add bad path {other} uuid 1234', check=False)
    t.check(r.rc == 1 and 'invalid uuid' in r.err, f'a malformed uuid refused: {r}')
    disk = export_and_map(t, vm, 'id0', loop, 'channels 2', f'uuid {UUID}')
    name = disk.removeprefix('/dev/')
    st = show(t, vm)
    e = [x for x in st if x['kind'] == 'export'][0]
    m = [x for x in st if x['kind'] == 'map'][0]
    t.eq((e['uuid'], m['uuid']), (UUID, UUID), 'the identity on both sides')
    t.eq(vm.run(f'cat /sys/block/{name}/wwid /sys/block/{name}/uuid').out.split(),
         [f'uuid.{UUID}', UUID], 'the disk\'s wwid and uuid')
    vm.run(f'mkdir -p /run/udev/rules.d && cp {ROOT}/{RULES} /run/udev/rules.d/')
    out = vm.run(f'udevadm test --action=add /sys/block/{name} 2>&1', check=False).out
    t.check(f'disk/by-id/ferryblk-uuid.{UUID}' in out,
            f'the udev rule names the disk by its identity: {out[-800:]!r}')
    r = vm.run(f'{t.ferryctl} blk export add dup path {other} uuid {UUID}', check=False)
    t.check(r.rc == 2 and 'another export has this identity' in r.err,
            f'a second export of one identity refused: {r}')
    vm.run(f'head -c {4 * MIB} /dev/urandom > /dev/shm/pattern')
    vm.run(f'dd if=/dev/shm/pattern of={disk} bs=1M oflag=direct status=none')
    # The same export again (a reload of the target's module): the disk
    # goes on.
    reexport(t, vm, 'id0', loop, f'uuid {UUID}', 'reconnected')
    vm.run(f'dd if=/dev/shm/pattern of={disk} bs=1M seek=4 oflag=direct status=none',
           timeout=120 * t.slow)
    vm.run('echo 3 > /proc/sys/vm/drop_caches')
    want = sha(vm, '/dev/shm/pattern', 4 * MIB)
    t.eq(sha(vm, disk, 4 * MIB), want, 'the data before, read back')
    t.eq(vm.run(f'dd if={disk} bs=1M skip=4 count=4 status=none | sha256sum').out.split()[0],
         want, 'the data after, read back')
    t.eq([x for x in show(t, vm) if x['kind'] == 'map'][0]['state'], 'live', 'the disk is live')
    # Another device under the same name: refused.
    before = sha(vm, other, 64 * MIB)
    reexport(t, vm, 'id0', other, '', 'is another disk now')
    log = vm.run('dmesg | grep "is another disk now"').out
    t.log(f'the client: {log.strip()}')
    t.check(f'was {UUID}' in log, f'the log names both identities: {log!r}')
    t.until(lambda: [x for x in show(t, vm) if x['kind'] == 'map'][0]['state'] == 'dead',
            10 * t.slow, 'the disk dead')
    r = vm.run(f'dd if=/dev/shm/pattern of={disk} bs=1M count=1 oflag=direct status=none',
               check=False, timeout=60 * t.slow)
    t.check(r.rc != 0, f'a write to the dead disk fails: {r}')
    r = vm.run(f'dd if={disk} of=/dev/null bs=4k count=1 iflag=direct status=none', check=False)
    t.check(r.rc != 0, f'a read of the dead disk fails: {r}')
    st = [x for x in show(t, vm) if x['kind'] == 'export'][0]
    t.eq((st['stats']['reads'], st['stats']['writes']), (0, 0),
         'operations on the other device')
    t.eq(sha(vm, other, 64 * MIB), before, 'the other device untouched')
    vm.run(f'{t.ferryctl} blk unmap {disk}')
    vm.run(f'{t.ferryctl} blk export del id0')
    vm.run(f'losetup -d {other} && rm -f /dev/shm/other.img /dev/shm/pattern')
    blk_teardown(t, vm, loop)


@case(timeout=500)
def blk_map_during_disconnect(t):
    """Maps race the target cutting their sessions: 12 times, a map starts
    and the target disconnects its server sessions 0 to 275 ms later (the
    map's session connecting, its open in flight, or its disk being
    added). Each map either fails with a clear error and leaves nothing
    behind, or gives a disk that reconnects and takes a write. No warning
    (the runner scans the console)."""
    vm = t.vm
    loop = blk_setup(t, vm)
    vm.run(f'{t.ferryctl} blk export add race0 path {loop}')
    outcomes = []
    for i in range(12):
        vm.run(f'({t.ferryctl} -j blk map 192.0.2.1 port {PORT} export race0 > /tmp/map.out 2>&1; '
               f'echo $? > /tmp/map.rc) >/dev/null 2>&1 & sleep {i * 0.025:.3f}; '
               f'for s in $({t.ferryctl} session show | awk \'$3 == "server" {{print $2}}\'); do '
               f'{t.ferryctl} session disconnect id $s; done', check=False)
        t.until(lambda: vm.run('test -s /tmp/map.rc', check=False).rc == 0, 90 * t.slow,
                'the map returned')
        r = vm.run('cat /tmp/map.rc /tmp/map.out; rm -f /tmp/map.rc /tmp/map.out')
        rc, out = r.out.split('\n', 1)
        maps = [x for x in show(t, vm) if x['kind'] == 'map']
        if rc == '0':
            disk = '/dev/' + json.loads(out[out.index('['):])[0]['disk']
            t.until(lambda: map_of(t, vm)['state'] == 'live', 60 * t.slow, f'{disk} live')
            w, _ = timed_write(t, vm, disk, i)
            t.eq(w, 0, f'a write to {disk}, mapped as its session was cut')
            vm.run(f'{t.ferryctl} blk unmap {disk}')
            outcomes.append('mapped')
        else:
            t.check(rc == '2' and bool(out.strip()), f'a map that failed says why: {rc} {out!r}')
            t.eq(maps, [], 'mappings left by a map that failed')
            outcomes.append(out.strip().splitlines()[-1][:60])
    t.log(f'outcomes: {outcomes}')
    vm.run(f'{t.ferryctl} blk export del race0')
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
    disk = export_and_map(t, vm, 'rc0', loop, 'channels 2')
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
    t.eq(m['state'], 'live', 'mapping state')
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
    back identical; a device that shrank under a mapping is not resized
    (EBUSY, the client's disk unchanged)."""
    vm = t.vm
    loop = blk_setup(t, vm)
    monitor_start(t, vm)
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
    # A device that shrank under a mapping is not resized.
    vm.run('truncate -s 32M /dev/shm/blk0.img')
    vm.run(f'losetup -c {loop}')
    r = vm.run(f'{t.ferryctl} blk export resize rw0', check=False)
    t.check(r.rc == 2 and 'shrank' in r.err, f'resize of a shrunk, mapped export: {r}')
    t.eq(vm.run(f'blockdev --getsz {first}').out.strip(), str(64 * MIB // 512),
         'the client disk after the refused shrink')
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
    # Every step was told to the monitor, in order.
    small, big = 64 * MIB // 512, 96 * MIB // 512
    ro_disk, first, second = (d.removeprefix('/dev/') for d in (disk, first, second))
    events = blk_events(monitor_stop(vm))
    # The client hears of the resize while the target's command returns:
    # either event may come first.
    events[8:10] = sorted(events[8:10])
    t.eq(events, [
        ('blk-export-add', 'ro0', small, None),
        ('blk-map-add', ro_disk, small, 'live'),
        ('blk-map-del', ro_disk, small, 'live'),
        ('blk-export-del', 'ro0', small, None),
        ('blk-export-add', 'rw0', small, None),
        ('blk-map-add', first, small, 'live'),
        ('blk-map-add', second, small, 'live'),
        ('blk-map-del', second, small, 'live'),
        ('blk-export-resize', 'rw0', big, None),
        ('blk-map-change', first, big, 'live'),
        ('blk-map-del', first, big, 'live'),
        ('blk-export-del', 'rw0', big, None),
    ], 'ferryctl monitor\'s events')
    blk_teardown(t, vm, loop)


@case(topology='pair', timeout=600)
def blk_netns(t):
    """A mapping connects from the network namespace of whoever maps (as
    ferry's own sessions do), and looks its key up there. B's link to A,
    with its rxe device, is moved into B's namespace `cl`; A's listener
    wants key k2, which `cl` has. From B's initial namespace A cannot be
    reached, and a key of the initial namespace is unknown in `cl`; from
    `cl` the export maps with k2, the session is listed in `cl` and not in
    the initial namespace, and data written through the disk is what A's
    device holds. The failed maps took no disk number: the disk is
    ferryblk0, and so is the one mapped after its unmap."""
    a, b = t.a, t.b
    ctl = t.ferryctl
    t.net_up(a, 0, 1)
    t.rxe_add(a)
    b.run('ip netns add cl && ip link set eth0 netns cl && ip -n cl link set lo up && '
          'ip -n cl link set eth0 up && ip -n cl addr add 192.0.2.2/24 dev eth0 && '
          'ip netns exec cl rdma link add rxe0 type rxe netdev eth0')
    for vm in (a, b):
        t.insmod(vm)
        vm.run(f'insmod {t.sample("ferry_blk")}')
    secret = a.run('head -c 32 /dev/urandom | base64').out.strip()
    a.run(f'echo {secret} | {ctl} key add k2')
    a.run(f'{ctl} listener add 192.0.2.1 port {PORT} key k2')
    dev = nullb(a, 'ns0')
    a.run(f'{ctl} blk export add n0 path {dev}')
    incl = f'ip netns exec cl {ctl}'
    b.run(f'echo {secret} | {incl} key add k2')
    b.wait_for('ip netns exec cl ping -c1 -W1 192.0.2.1', timeout=30 * t.slow)
    b.run(f'head -c 32 /dev/urandom | base64 | {ctl} key add k1')
    r = b.run(f'{ctl} blk map 192.0.2.1 port {PORT} export n0 key k1', check=False,
              timeout=90 * t.slow)
    t.check(r.rc == 2 and 'did not answer' in r.err,
            f'from the initial namespace, which has no link to A: {r.rc} {r.err!r}')
    r = b.run(f'{incl} blk map 192.0.2.1 port {PORT} export n0 key k1', check=False)
    t.check(r.rc == 2 and 'no such key in this network namespace' in r.err,
            f'a key of the initial namespace, from cl: {r.rc} {r.err!r}')
    m = json.loads(b.run(f'{incl} -j blk map 192.0.2.1 port {PORT} export n0 key k2').out)
    disk = '/dev/' + m[0]['disk']
    b.wait_for(f'test -b {disk}', timeout=30 * t.slow)
    sid = m[0]['session']
    mine = [s['id'] for s in json.loads(b.run(f'{incl} -j session show').out)]
    init = [s['id'] for s in t.ferryctl_json(b, 'session show')]
    t.log(f'mapped {disk} over session {sid}; sessions in cl {mine}, in the initial namespace {init}')
    t.check(sid in mine and sid not in init, "the session is cl's")
    b.run('head -c 4194304 /dev/urandom > /dev/shm/ns.bin')
    b.run(f'dd if=/dev/shm/ns.bin of={disk} bs=64k oflag=direct status=none')
    t.eq(sha(a, dev, 4 * MIB), sha(b, '/dev/shm/ns.bin', 4 * MIB), "the data on A's device")
    b.run(f'{ctl} blk unmap {disk}')
    # Disk numbers: the maps that failed took none, and an unmap gives its
    # number back at once.
    t.eq(m[0]['disk'], 'ferryblk0', 'the first disk, after two maps that failed')
    again = json.loads(b.run(f'{incl} -j blk map 192.0.2.1 port {PORT} export n0 key k2').out)
    t.eq(again[0]['disk'], 'ferryblk0', 'the disk mapped after the unmap')
    b.run(f'{ctl} blk unmap {again[0]["disk"]}')
    a.run(f'{ctl} blk export del n0')
    b.run(f'{ctl} key del k1 && {incl} key del k2 && rm -f /dev/shm/ns.bin')
    b.run('ip netns exec cl rdma link del rxe0 && ip -n cl link set eth0 netns 1 && '
          'ip netns del cl')
    for vm in (a, b):
        vm.run('rmmod ferry_blk')
    nullb_del(a, 'ns0')
    for vm in (a, b):
        vm.run('rmmod ferry')


@case(topology='pair', timeout=600)
def blk_two_hosts(t):
    """ferry_blk between two hosts: A exports a 64 MiB disk, B maps it over
    2 channels and writes it with fio (`fio`: 4 MiB, then 64 KiB writes at
    depth 32 from 2 jobs, verified), then reads it back verified. Nothing
    may stall: no request times out, the session never reconnects, no work
    request fails, and neither the mapping nor the export counts a failed
    operation. The disk's sha256 on B equals the device's on A. B, which
    has no export, cannot unload ferry_blk while it maps the disk."""
    a, b = t.pair_up()
    for vm in (a, b):
        vm.run(f'dmesg -C && insmod {t.sample("ferry_blk")}')
    a.run(f'{t.ferryctl} listener add 192.0.2.1 port {PORT}')
    a.run('truncate -s 64M /dev/shm/blk0.img')
    loop = a.run('losetup -f --show /dev/shm/blk0.img').out.strip()
    a.run(f'{t.ferryctl} blk export add two0 path {loop}')
    disk = '/dev/' + t.ferryctl_json(b, f'blk map 192.0.2.1 port {PORT} export two0 channels 2')[0]['disk']
    b.wait_for(f'test -b {disk}', timeout=30)
    slow_io_timeout(t, b, disk)
    # (Each job writes whole blocks: 4 MiB blocks take 4 MiB on the debug
    # kernel, whose jobs write 2 MiB otherwise.)
    most = 0
    for bs in ('4m', '64k'):
        mib = whole_blocks(fio_mib(t), dict(FIO_SIZES)[bs])
        most = max(most, mib)
        written, verified = fio(t, b, disk, bs, 32, mib=mib)
        _, again = fio(t, b, disk, bs, 32, verify_only=True, mib=mib)
        t.log(f'bs {bs} qd 32: {written} bytes written, {verified} verified, {again} verified again')
        want = 2 * mib * MIB
        t.check(written >= want and verified >= want and again >= want,
                f'bs {bs}: too few bytes ({written}, {verified}, {again})')
    half = most * MIB
    b.run('echo 3 > /proc/sys/vm/drop_caches')
    t.eq(sha(b, disk, 2 * half), sha(a, loop, 2 * half), "the disk's bytes on both hosts")
    client = [s for s in t.ferryctl_json(b, '-s session show') if s['role'] == 'client']
    server = [s for s in t.ferryctl_json(a, '-s session show') if s['role'] == 'server']
    t.log(f'client session: {client}')
    t.log(f'server session: {server}')
    t.require(len(client) == 1 and len(server) == 1, 'one session each side')
    t.eq((client[0]['state'], client[0].get('reconnects', 0)), ('connected', 0),
         'the client session, never reconnected')
    t.eq((client[0]['stats']['wc_errors'], server[0]['stats']['wc_errors']), (0, 0),
         'failed work completions (client, target)')
    m = [x for x in show(t, b) if x['kind'] == 'map'][0]
    e = [x for x in show(t, a) if x['kind'] == 'export'][0]
    t.log(f'mapping: {m}; export: {e}')
    t.eq((m['state'], m['stats']['failed'], e['stats']['failed']), ('live', 0, 0),
         'the mapping up, no failed operation on either side')
    t.check('timed out on queue' not in b.run('dmesg', check=False).out,
            'no request of the mapping timed out')
    # B holds no export: its mapping alone keeps ferry_blk loaded.
    r = b.run('rmmod ferry_blk', check=False)
    t.check(r.rc != 0 and 'in use' in r.err, f'unloading ferry_blk under a mapping: {r}')
    b.run(f'{t.ferryctl} blk unmap {disk}')
    a.run(f'{t.ferryctl} blk export del two0')
    a.run(f'losetup -d {loop} && rm -f /dev/shm/blk0.img')
    for vm in (a, b):
        vm.run('rmmod ferry_blk && rmmod ferry')
