# SPDX-License-Identifier: GPL-2.0
"""`make blktests BLKTESTS=DIR`: the upstream blktests block group's device
tests on a mapped ferry_blk disk (group `blktests`: not in `make test`)."""
import os
import re

from blk import blk_setup, blk_teardown, export_and_map
from harness import case


@case(timeout=3600, group='blktests')
def blktests_block(t):
    """`./check -d block` of the blktests tree in $BLKTESTS (or the tests
    $BLKTESTS_TESTS names) with TEST_DEVS the mapped disk of a 256 MiB
    export (2 channels), TIMEOUT $BLKTESTS_TIMEOUT (60 s by default) for
    those that run for a time: each test that ran is a result of its own
    (passed or failed); those blktests did not run are logged with its
    reason."""
    src = os.environ.get('BLKTESTS', '')
    t.require(os.path.isfile(os.path.join(src, 'check')), f'BLKTESTS names no blktests tree: {src!r}')
    vm = t.vm
    loop = blk_setup(t, vm, size_mib=256)
    disk = export_and_map(t, vm, 'bt0', loop, 'channels 2')
    # TIMEOUT bounds the tests that run for a time (TIMED): without it they
    # read or write the whole disk at its smallest block size, which takes
    # most of an hour through rxe under TCG for each.
    timeout = int(os.environ.get('BLKTESTS_TIMEOUT', '') or 60)
    vm.run(f"printf 'TEST_DEVS=({disk})\\nTIMEOUT={timeout}\\n' > /tmp/blktests.config")
    limits = vm.run(f'cd /sys/block/{disk.removeprefix("/dev/")}/queue && '
                    'grep . max_segments max_sectors_kb dma_alignment virt_boundary_mask '
                    'logical_block_size').out.split()
    t.log(f'the disk\'s limits: {" ".join(limits)}')
    # BLKTESTS_TESTS: some tests of the group instead (`block/042 ...`).
    tests = os.environ.get('BLKTESTS_TESTS', '') or 'block'
    r = vm.run(f'cd {src} && ./check -d -c /tmp/blktests.config -o /tmp/blktests-results {tests}',
               check=False, timeout=3000 * t.slow)
    ran = 0
    skipped = False
    for line in r.out.replace('\r', '\n').splitlines():
        m = re.match(r'(block/\d+)\b.*\[(passed|failed|not run)\]', line)
        if not m:
            # The reasons blktests gives for a test it did not run follow it.
            if skipped and line.startswith('    ') and line.strip():
                t.log(f'  {line.strip()}')
            continue
        name, verdict = m.groups()
        t.log(line.strip())
        skipped = verdict == 'not run'
        if skipped:
            continue
        ran += 1
        t.subresults.append((f'blktests/{name}', verdict == 'passed', line.strip()))
    if r.rc != 0:
        failed = vm.run('cat /tmp/blktests-results/*/block/*.out.bad 2>/dev/null | head -40',
                        check=False).out
        t.log(f'blktests exited {r.rc}; what failed said: {failed}')
    t.check(ran > 0, f'blktests ran no test: {r.out[-800:]!r}')
    vm.run(f'{t.ferryctl} blk unmap {disk}')
    vm.run(f'{t.ferryctl} blk export del bt0')
    blk_teardown(t, vm, loop)
