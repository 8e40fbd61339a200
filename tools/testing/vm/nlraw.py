#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Sends hand-made, possibly malformed, generic netlink requests and reports
the kernel's answer as JSON: errno, extack message, offending attribute and
missing attribute. Used by the tests to check that ferry's family rejects bad
input with the right errno and an extack that names the attribute.

usage: nlraw.py FAMILY CMD FLAGS ATTR... [-- FLAGS ATTR...]...
  FLAGS is do or dump. ATTR is TYPE:KIND:VALUE with KIND one of u32, u16, u64,
  str (NUL-terminated), raw (hex bytes), or TYPE:len=N:HEX to put a lying
  length in the header. Requests separated by -- are sent one after another,
  each answered on a line of its own.
"""
import json
import os
import socket
import struct
import sys

NETLINK_GENERIC = 16
SOL_NETLINK = 270
NETLINK_CAP_ACK = 10
NETLINK_EXT_ACK = 11
NLM_F_REQUEST, NLM_F_ACK, NLM_F_DUMP = 1, 4, 0x300
NLM_F_CAPPED, NLM_F_ACK_TLVS = 0x100, 0x200
NLMSG_ERROR, NLMSG_DONE = 2, 3


def attr(ty, payload, lie=None):
    ln = lie if lie is not None else 4 + len(payload)
    b = struct.pack('=HH', ln, ty) + payload
    return b + b'\0' * (-len(b) % 4)


def parse_attrs(buf):
    out = []
    while len(buf) >= 4:
        ln, ty = struct.unpack_from('=HH', buf)
        if ln < 4 or ln > len(buf):
            break
        out.append((ty & 0x3fff, buf[4:ln]))
        buf = buf[(ln + 3) & ~3:]
    return out


def family_id(sock, name):
    rep = request(sock, 0x10, 3, 0, attr(2, name.encode() + b'\0'))
    if rep['errno']:
        return None
    for ty, p in parse_attrs(rep['replies'][0]):
        if ty == 1:
            return struct.unpack('=H', p)[0]
    return None


SEQ = [100]


def request(sock, fam, cmd, flags, attrs):
    SEQ[0] += 1
    seq = SEQ[0]
    msg = struct.pack('=IHHII', 16 + 4 + len(attrs), fam, NLM_F_REQUEST | NLM_F_ACK | flags,
                      seq, 0) + struct.pack('=BBH', cmd, 1, 0) + attrs
    sock.send(msg)
    res = {'errno': 0, 'msg': None, 'bad_attr': None, 'missing_attr': None, 'replies': []}
    while True:
        data = sock.recv(1 << 20)
        while len(data) >= 16:
            ln, ty, fl, mseq, _ = struct.unpack_from('=IHHII', data)
            m, data = data[:ln], data[(ln + 3) & ~3:]
            if mseq != seq:
                continue
            if ty in (NLMSG_ERROR, NLMSG_DONE):
                err = -struct.unpack_from('=i', m, 16)[0]
                res['errno'] = err
                if fl & NLM_F_ACK_TLVS:
                    if ty == NLMSG_ERROR:
                        skip = 16 if fl & NLM_F_CAPPED else struct.unpack_from('=I', m, 20)[0]
                        tlvs = m[20 + skip:]
                    else:
                        tlvs = m[20:]
                    for t, p in parse_attrs(tlvs):
                        if t == 1:
                            res['msg'] = p.split(b'\0')[0].decode()
                        elif t == 2:
                            off = struct.unpack('=I', p)[0]
                            res['bad_attr'] = struct.unpack_from('=H', msg, off + 2)[0] & 0x3fff
                        elif t == 5:
                            res['missing_attr'] = struct.unpack('=I', p)[0]
                return res
            res['replies'].append(m[20:])


def encode(specs):
    body = b''
    for a in specs:
        ty, kind, val = a.split(':', 2)
        ty = int(ty)
        if kind == 'u32':
            body += attr(ty, struct.pack('=I', int(val, 0)))
        elif kind == 'u16':
            body += attr(ty, struct.pack('=H', int(val, 0)))
        elif kind == 'u64':
            body += attr(ty, struct.pack('=Q', int(val, 0)))
        elif kind == 'str':
            body += attr(ty, val.encode() + b'\0')
        elif kind == 'raw':
            body += attr(ty, bytes.fromhex(val))
        elif kind.startswith('len='):
            body += attr(ty, bytes.fromhex(val), lie=int(kind[4:]))
        else:
            raise SystemExit(f'unknown kind {kind}')
    return body


def main(argv):
    fam_name, cmd = argv[0], int(argv[1])
    requests = [[]]
    for a in argv[2:]:
        if a == '--':
            requests.append([])
        else:
            requests[-1].append(a)
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_GENERIC)
    sock.setsockopt(SOL_NETLINK, NETLINK_EXT_ACK, 1)
    sock.setsockopt(SOL_NETLINK, NETLINK_CAP_ACK, 1)
    sock.bind((0, 0))
    fam = family_id(sock, fam_name)
    if fam is None:
        print(json.dumps({'errno': 'nofamily'}))
        return 1
    for flags, *specs in requests:
        res = request(sock, fam, cmd, NLM_F_DUMP if flags == 'dump' else 0, encode(specs))
        res['replies'] = len(res['replies'])
        print(json.dumps(res), flush=True)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
