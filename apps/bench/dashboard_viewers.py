#!/usr/bin/env python3
"""What watching costs a job: the same five-process troupe-fmnist job (a coordinator, two
servers, two workers, on loopback) with its dashboard served and nobody watching, then with
--viewers viewers, each holding /events open and reading every state pushed (one connection
per viewer, as a browser tab does). Each side runs --reps times, alternating; printed per side:
the median batches/s (the report's steps over its wall time) and the watched job's rate over
the unwatched one's, beside the goal (at least 0.95: less than 5% of the step rate).

    /usr/bin/python3 apps/bench/dashboard_viewers.py --bin build/bin
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import tempfile
import threading
import time

SECRET = "dashboard-viewers-bench-secret"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def viewer(port, stop, counts, k):
    """Reads /events until the job ends or `stop` is set; counts the states received."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
            s.sendall(f"GET /events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
            while not stop.is_set():
                data = s.recv(1 << 16)
                if not data:
                    return
                counts[k] += data.count(b"\ndata: ") + data.startswith(b"data: ")
    except OSError:
        return


def run_job(args, viewers):
    with tempfile.TemporaryDirectory() as folder:
        fmnist = os.path.join(args.bin, "troupe-fmnist")
        at, board = f"127.0.0.1:{free_port()}", free_port()
        report = os.path.join(folder, "r.json")
        job = ["--epochs", str(args.epochs), "--blas-threads", "1", "--log-level", "warn"]
        env = dict(os.environ, TROUPE_SECRET=SECRET)
        procs = [subprocess.Popen([fmnist, *job, "--role", "coordinator", "--listen", at,
                                   "--workers", "2", "--servers", "2", "--report", report,
                                   "--dashboard-port", str(board)], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
        stop, counts, threads = threading.Event(), [0] * viewers, []
        for _ in range(100):  # the dashboard's port, before the other nodes join
            try:
                socket.create_connection(("127.0.0.1", board), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        for k in range(viewers):
            threads.append(threading.Thread(target=viewer, args=(board, stop, counts, k)))
            threads[-1].start()
        for role in ("server", "server", "worker", "worker"):
            procs.append(subprocess.Popen([fmnist, *job, "--role", role, "--coordinator", at],
                                          env=env, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL))
        codes = [p.wait(timeout=600) for p in procs]
        stop.set()
        for t in threads:
            t.join(timeout=60)
        if any(codes):
            raise SystemExit(f"a process failed: {codes}")
        with open(report) as f:
            r = json.load(f)
        return r["steps"] / r["wall_s"], sum(counts)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bin", default="build/bin")
    p.add_argument("--viewers", type=int, default=10)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args()
    rates = {0: [], args.viewers: []}
    states = 0
    for _ in range(args.reps):
        for v in (0, args.viewers):
            rate, got = run_job(args, v)
            rates[v].append(rate)
            states += got
    quiet, watched = statistics.median(rates[0]), statistics.median(rates[args.viewers])
    print(f"no viewers:          {quiet:8.1f} batches/s  (runs: {rates[0]})")
    print(f"{args.viewers:2d} viewers:          {watched:8.1f} batches/s  (runs: {rates[args.viewers]})")
    print(f"watched / unwatched: {watched / quiet:.3f}  (goal: at least 0.95); "
          f"{states} states pushed to the viewers in all")


if __name__ == "__main__":
    main()
