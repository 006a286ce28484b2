#!/usr/bin/env python3
"""NVMe/TCP ICReq/ICResp smoke client.

Connects to an NVMe/TCP target, sends a 128-byte ICReq and checks that a
well-formed 128-byte ICResp comes back.  Used as the default HOST_CLIENT_CMD
of the kernel-target interop scenario until our initiator takes over.

Address from --addr/--port or the env NVME_ADDR / NVME_PORT (run.sh sets
them to the hostfwd'd loopback port).  Exit 0 on success, 1 on a protocol
error, 2 if no connection could be made in time.  Only ever meant for
loopback addresses.
"""
import argparse
import os
import socket
import struct
import sys
import time

PDU_ICREQ = 0x00
PDU_ICRESP = 0x01
PDU_C2H_TERM_REQ = 0x03


def build_icreq(hdgst: bool, ddgst: bool, hpda: int = 0, maxr2t: int = 0) -> bytes:
    dgst = (1 if hdgst else 0) | (2 if ddgst else 0)
    # common header: type, flags, hlen, pdo, plen (LE u32)
    ch = struct.pack("<BBBBI", PDU_ICREQ, 0, 128, 0, 128)
    # PFV u16, HPDA u8, DGST u8, MAXR2T u32
    body = struct.pack("<HBBI", 0, hpda, dgst, maxr2t)
    pdu = ch + body
    return pdu + bytes(128 - len(pdu))


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return buf


def one_try(addr, port, timeout, hdgst, ddgst):
    with socket.create_connection((addr, port), timeout=timeout) as s:
        s.settimeout(timeout)
        s.sendall(build_icreq(hdgst, ddgst))
        head = recv_exact(s, 8)
        ptype, flags, hlen, pdo, plen = struct.unpack("<BBBBI", head)
        if ptype == PDU_C2H_TERM_REQ:
            rest = recv_exact(s, max(0, min(plen, 4096) - 8))
            raise ValueError(f"target answered C2HTermReq (fes={rest[:2].hex()})")
        rest = recv_exact(s, max(0, min(plen, 4096) - 8))
        return head + rest, (ptype, flags, hlen, pdo, plen)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--addr", default=os.environ.get("NVME_ADDR", "127.0.0.1"))
    ap.add_argument("--port", type=int, default=int(os.environ.get("NVME_PORT", "4420")))
    ap.add_argument("--timeout", type=float, default=10.0, help="per-I/O timeout (s)")
    ap.add_argument("--deadline", type=float, default=60.0,
                    help="keep retrying refused/closed connections this long (s)")
    ap.add_argument("--hdgst", action="store_true", help="request header digest")
    ap.add_argument("--ddgst", action="store_true", help="request data digest")
    args = ap.parse_args()

    end = time.monotonic() + args.deadline
    attempt = 0
    while True:
        attempt += 1
        try:
            pdu, (ptype, flags, hlen, pdo, plen) = one_try(
                args.addr, args.port, args.timeout, args.hdgst, args.ddgst)
            break
        except (ConnectionError, EOFError, socket.timeout, OSError) as e:
            # QEMU's hostfwd accepts before the guest listens: retry.
            if time.monotonic() >= end:
                print(f"icreq-smoke: FAIL no ICResp from {args.addr}:{args.port} "
                      f"after {attempt} attempts: {e}")
                return 2
            time.sleep(1.0)
        except ValueError as e:
            print(f"icreq-smoke: FAIL {e}")
            return 1

    errs = []
    if ptype != PDU_ICRESP:
        errs.append(f"pdu type 0x{ptype:02x} != 0x01")
    if hlen != 128:
        errs.append(f"hlen {hlen} != 128")
    if pdo != 0:
        errs.append(f"pdo {pdo} != 0")
    if plen != 128 or len(pdu) != 128:
        errs.append(f"plen {plen} (got {len(pdu)} bytes) != 128")
    pfv, cpda, dgst, maxh2cdata = struct.unpack_from("<HBBI", pdu, 8)
    if pfv != 0:
        errs.append(f"pfv {pfv} != 0")
    if maxh2cdata < 4096 or maxh2cdata % 4:
        errs.append(f"maxh2cdata {maxh2cdata} not >= 4096 and dword aligned")
    want_dgst = (1 if args.hdgst else 0) | (2 if args.ddgst else 0)
    if dgst & ~want_dgst:
        errs.append(f"dgst 0x{dgst:x} enables digests not requested (0x{want_dgst:x})")
    summary = (f"type=0x{ptype:02x} hlen={hlen} plen={plen} pfv={pfv} cpda={cpda} "
               f"dgst=0x{dgst:x} maxh2cdata={maxh2cdata}")
    if errs:
        print(f"icreq-smoke: FAIL {args.addr}:{args.port}: {'; '.join(errs)} ({summary})")
        return 1
    print(f"icreq-smoke: PASS {args.addr}:{args.port} ICResp {summary} (attempt {attempt})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
