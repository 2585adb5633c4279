#!/usr/bin/python3
"""What junk sent before any handshake costs a coordinator, with and without --tls-dir.

Starts a troupe-fmnist coordinator on loopback (waiting for nodes that never come), sends it
the junk docs/SECURITY.md describes, each on a fresh TCP connection (a 64-byte BASP header
that announces a 2 GiB payload, then that header followed by 4 KiB of zeros, 4 KiB of 0xff and
1 MiB of random bytes), and prints its resident memory after each, then after N more
connections of header + 4 KiB of zeros. Every connection is held open until the end.
Without TLS the N connections are skipped unless
--plain-repeats is given: each may cost the coordinator gigabytes.

Usage: apps/bench/junk_memory.py BUILD_BIN_DIR TLS_DIR [--repeats N] [--plain-repeats N]
(TLS_DIR as troupe-certs issue writes it.)
"""
import argparse
import os
import resource
import random
import socket
import subprocess
import sys
import time


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def send(port, data, held):
    """Sends `data` on a fresh connection and keeps it open (in `held`) as an attacker would."""
    s = socket.create_connection(("127.0.0.1", port))
    try:
        s.sendall(data)
    except OSError:
        pass  # the node may close first: that is the point
    held.append(s)


def settle(pid):
    time.sleep(1.5)  # let the node read what it was sent
    return rss_mib(pid)


def run(bindir, tls_dir, repeats):
    port = random.randint(20000, 40000)
    args = [f"{bindir}/troupe-fmnist", "--role", "coordinator", "--listen",
            f"127.0.0.1:{port}", "--workers", "1", "--servers", "1", "--log-level", "error"]
    if tls_dir:
        args += ["--tls-dir", tls_dir]
    env = dict(os.environ, TROUPE_SECRET="junk-memory-benchmark-secret")
    node = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    held = []
    try:
        time.sleep(2.0)
        label = "tls" if tls_dir else "plain"
        start = rss_mib(node.pid)
        print(f"{label:5s} start              {start:8.1f} MiB")
        # A BASP header (CAF 0.17: 32 bytes) of a client handshake announcing a 2 GiB
        # payload, padded to 64 bytes.
        header = bytes([1, 0, 0, 0, 0x7f, 0xff, 0xff, 0xf0]) + bytes(56)
        rnd = random.Random(7).randbytes(1 << 20)
        for name, data in [("64-byte header", header),
                           ("+ 4 KiB zeros", header + b"\0" * 4096),
                           ("+ 4 KiB 0xff", header + b"\xff" * 4096),
                           ("+ 1 MiB random", header + rnd)]:
            send(port, data, held)
            print(f"{label:5s} {name:18s} {settle(node.pid):8.1f} MiB"
                  f"  (alive: {node.poll() is None})")
        if repeats:
            begin = time.time()
            for _ in range(repeats):
                send(port, header + b"\0" * 4096, held)
            took = time.time() - begin
            print(f"{label:5s} {repeats} more conns   {settle(node.pid):8.1f} MiB"
                  f"  (alive: {node.poll() is None}, {repeats / took:.0f} connections/s)")
        print(f"{label:5s} growth             {rss_mib(node.pid) - start:8.1f} MiB")
    finally:
        for s in held:
            s.close()
        node.kill()
        node.wait()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("bindir")
    p.add_argument("tls_dir")
    p.add_argument("--repeats", type=int, default=1000)
    p.add_argument("--plain-repeats", type=int, default=0)
    a = p.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # connections are held open
    run(a.bindir, "", a.plain_repeats)
    run(a.bindir, a.tls_dir, a.repeats)


if __name__ == "__main__":
    sys.exit(main())
