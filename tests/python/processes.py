"""A process of a Python test, its output in a file: waits act on what it printed (a log line),
never on time; every wait has a bound. Shared by the tests that run the examples."""
import os
import re
import signal
import socket
import subprocess
import sys
import time

BOUND_S = 300  # every wait's bound; none comes near it


def write_script(folder, name, text):
    """`text` as the script `name` in `folder`; its path."""
    path = os.path.join(folder, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def free_port():
    """A port on 127.0.0.1 that nobody listens on now (for a process to listen on next)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Process:
    """`program` (a script run under this Python, or a command as a tuple) with `args`,
    TROUPE_SECRET set to `secret`; killed if still running at stop()."""

    def __init__(self, program, args, log, secret):
        self.log = log
        env = dict(os.environ, TROUPE_SECRET=secret)
        command = [*program] if isinstance(program, tuple) else [sys.executable, program]
        with open(log, "w") as out:
            self.popen = subprocess.Popen([*command, *args], stdout=out,
                                          stderr=subprocess.STDOUT, env=env)

    def output(self):
        with open(self.log) as f:
            return f.read()

    def wait_for(self, pattern, count=1):
        """The count-th match of `pattern` in the output once it is there; None if the process
        ended (or the bound passed) first."""
        deadline = time.monotonic() + BOUND_S
        while time.monotonic() < deadline:
            ended = self.popen.poll() is not None
            found = list(re.finditer(pattern, self.output()))
            if len(found) >= count:
                return found[count - 1]
            if ended:
                return None
            time.sleep(0.02)
        return None

    def finish(self):
        """The exit code (the process is killed if it does not end within the bound)."""
        try:
            return self.popen.wait(BOUND_S)
        finally:
            self.stop()

    def stop(self):
        if self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait()


def grow_then_lose(test, script, flags, tmp, secret, first_commits=1):
    """The elastic_loop example (`script`) as a driver and loops with `flags`: two loops, a
    third that joins once the first has committed `first_commits` steps at size 2, and the
    second killed (kill -9) once the third has committed at size 3; the first and third run to
    their end (exit 0, checked on `test`). Returns the three loops (a, b, c)."""
    def loop(args, name):
        return Process(script, args, os.path.join(tmp, name), secret)
    driver = loop(["--serve", "127.0.0.1:0", "--min-size", "2"], "driver.log")
    try:
        test.assertTrue(driver.wait_for(r"serving at \S+"), driver.output())
        address = re.search(r"serving at (\S+)", driver.output()).group(1)
        a = loop(["--join", address, *flags], "a.log")
        b = loop(["--join", address, *flags], "b.log")
        test.assertTrue(a.wait_for(r"commit epoch 0 .* size 2", first_commits), a.output())
        c = loop(["--join", address, *flags], "c.log")
        test.assertTrue(c.wait_for(r"commit .* size 3"), c.output())
        b.popen.send_signal(signal.SIGKILL)
        b.finish()
        test.assertEqual(a.finish(), 0, a.output())
        test.assertEqual(c.finish(), 0, c.output())
    finally:
        driver.stop()
    return a, b, c
