"""A process of a Python test, its output in a file: waits act on what it printed (a log line),
never on time; every wait has a bound. Shared by the tests that run the examples."""
import os
import re
import socket
import subprocess
import sys
import time

BOUND_S = 300  # every wait's bound; none comes near it


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
