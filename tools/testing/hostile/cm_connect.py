#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""A bare rdma_cm connect with handmade ferry connect data, as any local
user can send one through /dev/infiniband/rdma_cm: the takeover attempt of
the session_takeover case. No QP and no hello: it prints how the listener
answered ("rejected REASON" with ferry's reason code, or "accepted") and
exits 0, or exits 1 if the CM itself failed.

usage: cm_connect.py ADDR PORT SESSION_ID GENERATION CHANNEL CHANNELS {none,forged}
"""
import ctypes
import os
import socket
import struct
import sys

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


def connect_data(sid, gen, channel, channels, proof):
    """ferry's 1.2 connect data (Documentation/session.md)."""
    flags = 1 if proof == 'forged' else 0
    b = b'FRRY' + bytes([1, 2]) + struct.pack('<HQIHHIHH', flags, sid, gen, channel,
                                               channels, 0, 0, 0)
    if proof == 'forged':
        b += os.urandom(24)
    return b.ljust(56, b'\0')


def main():
    addr, port, sid, gen, channel, channels, proof = sys.argv[1:8]
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
    cid = ctypes.c_void_p()
    if cm.rdma_create_id(ch, ctypes.byref(cid), None, RDMA_PS_TCP):
        sys.exit(f'rdma_create_id: {os.strerror(ctypes.get_errno())}')

    def wait():
        ev = ctypes.POINTER(Event)()
        if cm.rdma_get_cm_event(ch, ctypes.byref(ev)):
            sys.exit(f'rdma_get_cm_event: {os.strerror(ctypes.get_errno())}')
        kind, status = ev.contents.event, ev.contents.status
        n = ev.contents.conn.private_data_len
        data = ctypes.string_at(ev.contents.conn.private_data, n) if n else b''
        cm.rdma_ack_cm_event(ev)
        return EVENTS.get(kind, str(kind)), status, data

    dst = struct.pack('<H', socket.AF_INET) + struct.pack('>H', int(port)) + \
        socket.inet_aton(addr) + bytes(8)
    if cm.rdma_resolve_addr(cid, None, dst, 2000):
        sys.exit(f'rdma_resolve_addr: {os.strerror(ctypes.get_errno())}')
    if wait()[0] != 'addr-resolved' or cm.rdma_resolve_route(cid, 2000) or \
            wait()[0] != 'route-resolved':
        sys.exit('no route')
    pd = connect_data(int(sid, 0), int(gen), int(channel), int(channels), proof)
    buf = ctypes.create_string_buffer(pd, len(pd))
    param = ConnParam(ctypes.cast(buf, ctypes.c_void_p), len(pd), 1, 1, 0, 7, 0, 0, 0x123)
    if cm.rdma_connect(cid, ctypes.byref(param)):
        sys.exit(f'rdma_connect: {os.strerror(ctypes.get_errno())}')
    kind, status, data = wait()
    if kind == 'rejected':
        reason = struct.unpack_from('<H', data, 6)[0] if data[:4] == b'FRRY' else -1
        print(f'rejected {reason}')
    elif kind in ('connect-response', 'established'):
        print('accepted')
    else:
        print(f'{kind} {status}')
    sys.stdout.flush()
    os._exit(0)


if __name__ == '__main__':
    main()
