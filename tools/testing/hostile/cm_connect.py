#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Bare rdma_cm connects with handmade ferry connect data, as any local
user can send them through /dev/infiniband/rdma_cm: the takeover attempts
of the session_takeover case, and the flood of session_admission. No QP and
no hello: for each connect it prints how the listener answered ("rejected
REASON" with ferry's reason code, or "accepted") and exits 0 once --hold
seconds have passed, or exits 1 if the CM itself failed.

usage: cm_connect.py ADDR PORT SESSION_ID GENERATION CHANNEL CHANNELS {none,forged}
                     [--src ADDR] [--count N] [--hold S] [--max-msg B] [--depth N]
                     [--minor M]
       cm_connect.py ADDR PORT --listen [--hold S]
SESSION_ID "random" draws a new id for each of the --count connects.

With --listen it is a silent server instead: it listens on ADDR and PORT,
accepts every connection request with the accept data a ferry server sends
(the session id echoed, a nonce) but without a QP of its own, and then says
nothing: a ferry client's channel comes up to its handshake, with its QP
built, and waits for a hello reply that never comes. It prints "accepted"
for each and exits after --hold seconds.
"""
import argparse
import ctypes
import os
import socket
import struct
import sys
import time

RDMA_PS_TCP = 0x0106
EVENTS = {0: 'addr-resolved', 1: 'addr-error', 2: 'route-resolved', 3: 'route-error',
          5: 'connect-response', 6: 'connect-error', 7: 'unreachable', 8: 'rejected',
          9: 'established', 10: 'disconnected'}


class ConnParam(ctypes.Structure):
    _fields_ = [('private_data', ctypes.c_void_p), ('private_data_len', ctypes.c_uint8),
                ('responder_resources', ctypes.c_uint8), ('initiator_depth', ctypes.c_uint8),
                ('flow_control', ctypes.c_uint8), ('retry_count', ctypes.c_uint8),
                ('rnr_retry_count', ctypes.c_uint8), ('srq', ctypes.c_uint8),
                ('qp_num', ctypes.c_uint32)]


class Event(ctypes.Structure):
    _fields_ = [('id', ctypes.c_void_p), ('listen_id', ctypes.c_void_p),
                ('event', ctypes.c_int), ('status', ctypes.c_int), ('conn', ConnParam)]


def connect_data(sid, gen, channel, channels, proof, max_msg=0, depth=0, minor=2):
    """ferry's 1.2 connect data (Documentation/session.md)."""
    flags = 1 if proof == 'forged' else 0
    b = b'FRRY' + bytes([1, minor]) + struct.pack('<HQIHHIHH', flags, sid, gen, channel,
                                               channels, max_msg, depth, 0)
    if proof == 'forged':
        b += os.urandom(24)
    return b.ljust(56, b'\0')


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('addr')
    ap.add_argument('port')
    for name in ('sid', 'gen', 'channel', 'channels', 'proof'):
        ap.add_argument(name, nargs='?')
    ap.add_argument('--listen', action='store_true')
    ap.add_argument('--src')
    ap.add_argument('--count', type=int, default=1)
    ap.add_argument('--hold', type=float, default=0)
    ap.add_argument('--max-msg', type=int, default=0)
    ap.add_argument('--depth', type=int, default=0)
    ap.add_argument('--minor', type=int, default=2)
    a = ap.parse_args()
    cm = ctypes.CDLL('librdmacm.so.1', use_errno=True)
    cm.rdma_create_event_channel.restype = ctypes.c_void_p
    cm.rdma_create_id.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                                  ctypes.c_void_p, ctypes.c_int]
    cm.rdma_resolve_addr.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                     ctypes.c_int]
    cm.rdma_resolve_route.argtypes = [ctypes.c_void_p, ctypes.c_int]
    cm.rdma_connect.argtypes = [ctypes.c_void_p, ctypes.POINTER(ConnParam)]
    cm.rdma_get_cm_event.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.POINTER(Event))]
    cm.rdma_ack_cm_event.argtypes = [ctypes.POINTER(Event)]

    ch = cm.rdma_create_event_channel()
    if not ch:
        sys.exit(f'rdma_create_event_channel: {os.strerror(ctypes.get_errno())}')

    def wait():
        ev = ctypes.POINTER(Event)()
        if cm.rdma_get_cm_event(ch, ctypes.byref(ev)):
            sys.exit(f'rdma_get_cm_event: {os.strerror(ctypes.get_errno())}')
        kind, status = ev.contents.event, ev.contents.status
        n = ev.contents.conn.private_data_len
        data = ctypes.string_at(ev.contents.conn.private_data, n) if n else b''
        cm.rdma_ack_cm_event(ev)
        return EVENTS.get(kind, str(kind)), status, data

    def sockaddr(ip, port):
        return struct.pack('<H', socket.AF_INET) + struct.pack('>H', port) + \
            socket.inet_aton(ip) + bytes(8)

    if a.listen:
        listen(cm, ch, sockaddr(a.addr, int(a.port)), a.hold)
    dst = sockaddr(a.addr, int(a.port))
    src = sockaddr(a.src, 0) if a.src else None
    for _ in range(a.count):
        cid = ctypes.c_void_p()
        if cm.rdma_create_id(ch, ctypes.byref(cid), None, RDMA_PS_TCP):
            sys.exit(f'rdma_create_id: {os.strerror(ctypes.get_errno())}')
        if cm.rdma_resolve_addr(cid, src, dst, 2000):
            sys.exit(f'rdma_resolve_addr: {os.strerror(ctypes.get_errno())}')
        if wait()[0] != 'addr-resolved' or cm.rdma_resolve_route(cid, 2000) or \
                wait()[0] != 'route-resolved':
            sys.exit('no route')
        sid = struct.unpack('<Q', os.urandom(8))[0] | 1 if a.sid == 'random' else int(a.sid, 0)
        pd = connect_data(sid, int(a.gen), int(a.channel), int(a.channels), a.proof,
                          a.max_msg, a.depth, a.minor)
        buf = ctypes.create_string_buffer(pd, len(pd))
        # A QP number of its own for each: the CM refuses a second request
        # from the same one as stale.
        qpn = struct.unpack('<I', os.urandom(4))[0] & 0xffffff | 0x100
        param = ConnParam(ctypes.cast(buf, ctypes.c_void_p), len(pd), 1, 1, 0, 7, 0, 0, qpn)
        if cm.rdma_connect(cid, ctypes.byref(param)):
            sys.exit(f'rdma_connect: {os.strerror(ctypes.get_errno())}')
        kind, status, data = wait()
        if kind == 'rejected':
            reason = struct.unpack_from('<H', data, 6)[0] if data[:4] == b'FRRY' else -1
            print(f'rejected {reason}')
        elif kind in ('connect-response', 'established'):
            # Left as it is: the server waits for an RTU and a hello that
            # never come.
            print('accepted')
        else:
            print(f'{kind} {status}')
        sys.stdout.flush()
    time.sleep(a.hold)
    os._exit(0)


def listen(cm, ch, addr, hold):
    """The silent server of --listen."""
    cm.rdma_bind_addr.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    cm.rdma_listen.argtypes = [ctypes.c_void_p, ctypes.c_int]
    cm.rdma_accept.argtypes = [ctypes.c_void_p, ctypes.POINTER(ConnParam)]
    lid = ctypes.c_void_p()
    if cm.rdma_create_id(ch, ctypes.byref(lid), None, RDMA_PS_TCP) or \
            cm.rdma_bind_addr(lid, addr) or cm.rdma_listen(lid, 64):
        sys.exit(f'listen: {os.strerror(ctypes.get_errno())}')
    print('listening')
    sys.stdout.flush()
    end = time.monotonic() + hold
    fd = ctypes.cast(ch, ctypes.POINTER(ctypes.c_int))[0]
    os.set_blocking(fd, False)
    while time.monotonic() < end:
        ev = ctypes.POINTER(Event)()
        if cm.rdma_get_cm_event(ch, ctypes.byref(ev)):
            time.sleep(0.05)
            continue
        if ev.contents.event == 4:  # RDMA_CM_EVENT_CONNECT_REQUEST
            n = ev.contents.conn.private_data_len
            req = ctypes.string_at(ev.contents.conn.private_data, n) if n else b''
            sid = req[8:16] if req[:4] == b'FRRY' and n >= 16 else bytes(8)
            acc = b'FRRY' + bytes([1, 2, 0, 0]) + sid + os.urandom(16)
            buf = ctypes.create_string_buffer(acc, len(acc))
            qpn = struct.unpack('<I', os.urandom(4))[0] & 0xffffff | 0x100
            param = ConnParam(ctypes.cast(buf, ctypes.c_void_p), len(acc), 1, 1, 0, 7, 7, 0,
                              qpn)
            cid = ev.contents.id
            cm.rdma_ack_cm_event(ev)
            print('accepted' if cm.rdma_accept(cid, ctypes.byref(param)) == 0 else
                  f'accept failed: {os.strerror(ctypes.get_errno())}')
            sys.stdout.flush()
        else:
            cm.rdma_ack_cm_event(ev)
    os._exit(0)


if __name__ == '__main__':
    main()
