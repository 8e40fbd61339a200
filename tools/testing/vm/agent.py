#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Guest agent of ferry's VM runner.

Runs inside the test VM (as the virtme-ng --exec command) and serves the host
over the virtio-serial port named ferry.ctl: one JSON request per line, one JSON
reply per line, commands run one at a time with a timeout.

Besides shell commands it answers three requests of the runner's own:
`__baseline__` records the state the VM is in (guest_state.py), `__reset__`
brings it back there after a case and reports what it did and what is left,
and `__exit__` ends the agent (and with it the VM).
"""
import ctypes
import glob
import json
import os
import subprocess
import sys
import time
import traceback

import guest_state


def find_port(name, timeout=120):
    """The device of the virtio-serial port called `name`. The host names a
    port after the guest has added it, so on a slow host the agent may start
    before the name shows: it waits for it."""
    deadline = time.monotonic() + timeout
    while True:
        for p in glob.glob('/sys/class/virtio-ports/*/name'):
            dev = '/dev/' + p.split('/')[-2]
            if read(p) == name and os.path.exists(dev):
                return dev
        if time.monotonic() > deadline:
            return None
        time.sleep(0.1)


def read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ''


# prctl(2): the orphans of the agent's commands become its children.
PR_SET_CHILD_SUBREAPER = 36


def main():
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    port = find_port('ferry.ctl')
    if not port:
        print('agent: no virtio-serial port named ferry.ctl after 120 s', file=sys.stderr)
        return 1
    fd = os.open(port, os.O_RDWR)
    rx = os.fdopen(fd, 'rb', buffering=0)
    tx = os.fdopen(os.dup(fd), 'wb', buffering=0)

    def send(obj):
        # An unbuffered write to the port may take only part of a long reply.
        data = memoryview((json.dumps(obj) + '\n').encode())
        while data:
            data = data[tx.write(data):]

    send({'ready': True,
          'clocksource': read('/sys/devices/system/clocksource/clocksource0/current_clocksource'),
          'kernel': os.uname().release})
    buf = b''
    base = None
    while True:
        chunk = rx.read(65536)
        if not chunk:
            continue
        buf += chunk
        while b'\n' in buf:
            line, buf = buf.split(b'\n', 1)
            req = json.loads(line)
            if req.get('cmd') == '__exit__':
                send({'id': req['id'], 'rc': 0, 'out': '', 'err': ''})
                return 0
            if req.get('cmd') in ('__baseline__', '__reset__'):
                try:
                    rep = {'rc': 0, 'out': '', 'err': ''}
                    if req['cmd'] == '__baseline__':
                        base = guest_state.baseline()
                    else:
                        rep['done'], rep['left'] = guest_state.restore(base)
                    rep['taint'] = guest_state.taint()
                    rep['debug_locks'] = guest_state.debug_locks()
                except Exception:  # reported to the host, which fails the case
                    rep = {'rc': 2, 'out': '', 'err': traceback.format_exc()}
                rep['id'] = req['id']
                send(rep)
                continue
            # Orphans of earlier commands that ended (none of the agent's
            # own commands runs now).
            guest_state.reap()
            p = subprocess.Popen(['/bin/bash', '-c', req['cmd']],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 stdin=subprocess.DEVNULL, start_new_session=True)
            try:
                out, err = p.communicate(timeout=req.get('timeout', 60))
                rep = {'rc': p.returncode}
            except subprocess.TimeoutExpired:
                # The whole command, children included, is its process group.
                os.killpg(p.pid, 9)
                out, err = p.communicate()
                rep = {'rc': None, 'timeout': True}
            rep['out'] = out.decode(errors='replace')
            rep['err'] = err.decode(errors='replace')
            rep['id'] = req['id']
            send(rep)


if __name__ == '__main__':
    sys.exit(main())
