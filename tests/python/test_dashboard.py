"""The web dashboard (--dashboard-port) in a real browser: a five-process job (a coordinator,
two servers under --replication 2, two workers) is loaded in headless Chromium while it trains;
the page must show every actor of the supervision tree, both workers' rates and a loss curve
with points. Then a server is killed and the page's timeline must show the loss (and a
checkpoint). A screenshot
goes to TROUPE_TEST_OUTPUT (default: the system's temporary folder). The server's own rules
(Host, read-only, CSP) are checked over plain HTTP. Every act waits for a log line of a job
with a floor under its length (--worker-delay-ms), never for a time. Skipped without
Chromium. TROUPE_BIN names the directory of troupe-fmnist."""
import html.parser
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import unittest
import urllib.request

from processes import BOUND_S, Process, free_port

FMNIST = (os.path.join(os.environ.get("TROUPE_BIN", ""), "troupe-fmnist"),)
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SECRET = "a-long-random-secret-for-tests"
# 10 epochs of 94 batches per worker, a floor of 30 ms a batch: 28 s at least, while the
# test's acts (two page loads and a kill) follow the first epoch.
JOB = ["--epochs", "10", "--train-limit", "6000", "--test-limit", "300", "--batch", "32",
       "--blas-threads", "1", "--log-level", "info", "--request-timeout", "4"]



class Tables(html.parser.HTMLParser):
    """The cells of every table row under the element with each id, and the polylines'
    data-points by chart title."""

    def __init__(self):
        super().__init__()
        self.stack, self.rows, self.points, self.items, self.text = [], {}, {}, [], None
        self.chart = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        owner = a.get("id") or (self.stack[-1] if self.stack else None)
        self.stack.append(owner)
        if tag == "tr":
            self.rows.setdefault(owner, []).append([])
        if tag in ("td", "th", "li"):
            self.text = ""
        if tag == "div" and "data-title" in a:
            self.chart = a["data-title"]
        if tag == "polyline":
            self.points[self.chart] = int(a.get("data-points", "0"))

    def handle_endtag(self, tag):
        owner = self.stack.pop() if self.stack else None
        if tag in ("td", "th") and self.text is not None and self.rows.get(owner):
            self.rows[owner][-1].append(self.text)
        if tag == "li" and self.text is not None:
            self.items.append(self.text)
        if tag in ("td", "th", "li"):
            self.text = None

    def handle_data(self, data):
        if self.text is not None:
            self.text += data


def browse(url, folder, screenshot=None):
    """The page's DOM after its script drew the first state (the page's stream opens after a
    second of its own time, and a headless browser would wait for that request forever)."""
    args = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            f"--user-data-dir={folder}/chromium", "--virtual-time-budget=800",
            "--window-size=1400,2000"]
    args += [f"--screenshot={screenshot}"] if screenshot else ["--dump-dom"]
    done = subprocess.run([*args, url], capture_output=True, text=True, timeout=BOUND_S)
    if screenshot:
        return None
    page = Tables()
    page.feed(done.stdout)
    return page


def get(url, host=None):
    request = urllib.request.Request(url, headers={"Host": host} if host else {})
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()


def wait_for_state(url, holds):
    """Whether a state that `holds` is served within the bound."""
    deadline = time.monotonic() + BOUND_S
    while time.monotonic() < deadline:
        if holds(json.loads(get(url + "state")[2])):
            return True
        time.sleep(0.05)
    return False


@unittest.skipIf(CHROMIUM is None, "Chromium is missing (Debian: chromium)")
class Dashboard(unittest.TestCase):
    def test_the_page_shows_a_training_job_and_a_lost_server(self):
        with tempfile.TemporaryDirectory() as folder:
            at, board = f"127.0.0.1:{free_port()}", free_port()
            log = lambda name: os.path.join(folder, name + ".log")
            c = Process(FMNIST, [*JOB, "--role", "coordinator", "--listen", at, "--workers",
                                 "2", "--servers", "2", "--replication", "2",
                                 "--worker-delay-ms", "0:30,1:30", "--dashboard-port",
                                 str(board), "--checkpoint-dir", os.path.join(folder, "ckpt")],
                          log("c"), SECRET)
            servers = [Process(FMNIST, ["--role", "server", "--coordinator", at, "--name",
                                        f"s{i}", "--request-timeout", "4"], log(f"s{i}"),
                               SECRET) for i in range(2)]
            workers = [Process(FMNIST, [*JOB, "--role", "worker", "--coordinator", at,
                                        "--name", f"w{i}"], log(f"w{i}"), SECRET)
                       for i in range(2)]
            everyone = [c, *servers, *workers]
            logs = lambda: "\n".join(p.output()[-2000:] for p in everyone)
            url = f"http://127.0.0.1:{board}/"
            try:
                self.assertIsNotNone(c.wait_for(r"epoch 1/10"), logs())
                page = browse(url, folder)
                state = json.loads(get(url + "state")[2])
                actors = [r[0] for r in state["views"]["tree"]["rows"]]
                shown = [r[0] for r in page.rows.get("tree", [])[1:]]
                for actor in actors:
                    self.assertIn(actor, shown, (actors, shown))
                rates = {r[0]: float(r[5]) for r in page.rows.get("workers", [])[1:]}
                self.assertEqual(sorted(rates), ["w0", "w1"], page.rows.get("workers"))
                self.assertTrue(all(v > 0 for v in rates.values()), rates)
                self.assertGreater(page.points.get("train loss", 0), 1, page.points)
                self.assertTrue(any("epoch 1: test accuracy" in i for i in page.items),
                                page.items)  # the timeline
                servers[1].stop()
                self.assertIsNotNone(c.wait_for(r"lost server 's1'"), logs())
                # The dashboard samples the job about once a second: wait for a sample with the
                # loss (and a checkpoint: one is written each epoch).
                events = lambda s: {r[1] for r in s["views"]["timeline"]["rows"]}
                self.assertTrue(wait_for_state(url, lambda s: {"lost", "checkpoint"} <= events(s)),
                                logs())
                page = browse(url, folder)
                self.assertTrue(any("lost" in i and "s1" in i for i in page.items), page.items)
                self.assertTrue(any("checkpoint: step" in i for i in page.items), page.items)
                shot = os.path.join(os.environ.get("TROUPE_TEST_OUTPUT", tempfile.gettempdir()),
                                    "dashboard.png")
                browse(url, folder, screenshot=shot)
                self.assertGreater(os.path.getsize(shot), 10000)
                print(f"screenshot: {shot}")
                self.check_the_servers_rules(board)
                self.assertEqual(c.finish(), 0, logs())
            finally:
                for p in everyone:
                    p.stop()

    def check_the_servers_rules(self, port):
        url = f"http://127.0.0.1:{port}/"
        code, headers, _ = get(url)
        self.assertEqual(code, 200)
        self.assertIn("default-src 'self'", headers["Content-Security-Policy"])
        self.assertEqual(get(url, host="evil.example:80")[0], 421)  # DNS rebinding
        self.assertEqual(get(url + "state", host=f"localhost:{port}")[0], 200)
        self.assertEqual(get(url + "nothing")[0], 404)
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            s.sendall(f"POST /state HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
            self.assertIn(b" 405 ", s.recv(200))
        # The stream: two states pushed, each one line of JSON.
        with socket.create_connection(("127.0.0.1", port), timeout=BOUND_S) as s:
            s.sendall(f"GET /events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
            got = b""
            while got.count(b"\ndata: ") < 2:
                chunk = s.recv(1 << 16)
                self.assertTrue(chunk, got[:300])
                got += chunk
            self.assertIn(b"text/event-stream", got)
            state = got.split(b"\ndata: ")[1].split(b"\n\n")[0]
            self.assertIn("workers", json.loads(state)["views"])


if __name__ == "__main__":
    unittest.main()
