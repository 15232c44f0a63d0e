"""serve_util.py: start `dsv4 serve` for the end-to-end tests, wait until /health says ready,
read /metrics, and stop it cleanly. Not a test itself (scripts/test.sh runs test_*.py).

The binary is <repo>/build/dsv4 unless a test is run with --bin PATH. The server runs the CPU
--demo model unless a test is run with --serve-args "ARGS" (e.g. "--device cuda --model DIR" on a
GPU machine: the same end-to-end tests against the CUDA runner)."""
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "tests", "python", "serve_script.json")


def binary_from_argv():
    """--bin PATH on the command line, else build/dsv4."""
    if "--bin" in sys.argv:
        return os.path.abspath(sys.argv[sys.argv.index("--bin") + 1])
    return os.path.join(REPO, "build", "dsv4")


def model_args_from_argv():
    """--serve-args "ARGS" on the command line (split like a shell), else --demo."""
    if "--serve-args" in sys.argv:
        return shlex.split(sys.argv[sys.argv.index("--serve-args") + 1])
    return ["--demo"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`dsv4 serve --demo` (or --serve-args) on 127.0.0.1 with extra arguments, as a context manager."""

    def __init__(self, *args, binary=None, ready_timeout=180):
        self.binary = binary or binary_from_argv()
        self.port = free_port()
        self.args = ["serve", *model_args_from_argv(), "--host", "127.0.0.1", "--port", str(self.port), *args]
        self.ready_timeout = ready_timeout
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.NamedTemporaryFile(prefix="dsv4-serve-", suffix=".log", delete=False)
        self.proc = None

    def __enter__(self):
        if not os.path.exists(self.binary):
            raise SystemExit(f"{self.binary} does not exist: build first (scripts/setup.sh) or pass --bin PATH")
        self.proc = subprocess.Popen([self.binary, *self.args], stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + self.ready_timeout
        saw_503 = False
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"dsv4 serve exited with {self.proc.returncode}:\n{self.output()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        self.saw_loading = saw_503
                        return self
            except urllib.error.HTTPError as e:
                saw_503 = saw_503 or e.code == 503
            except (urllib.error.URLError, ConnectionError, socket.timeout):
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"dsv4 serve did not become ready in {self.ready_timeout} s:\n{self.output()}")

    def __exit__(self, *exc):
        code = self.stop()
        if exc[0] is None and code != 0:
            raise RuntimeError(f"dsv4 serve exited with {code} at shutdown:\n{self.output()}")

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError(f"dsv4 serve did not stop on SIGTERM:\n{self.output()}")

    def output(self):
        self.log.flush()
        with open(self.log.name, encoding="utf-8", errors="replace") as f:
            return f.read()

    # HTTP helpers (stdlib only, so failures show the raw answer).
    def request(self, method, path, body=None, headers=None, timeout=120):
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json", **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read()

    def metrics(self):
        status, _, body = self.request("GET", "/metrics")
        assert status == 200, (status, body)
        return parse_metrics(body.decode())


_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\} (\S+)$')


def parse_metrics(text):
    """{(name, frozenset of label pairs without model_name): value}"""
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or not line:
            continue
        m = _SAMPLE.match(line)
        assert m, f"bad Prometheus line: {line!r}"
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2)))
        labels.pop("model_name", None)
        out[(m.group(1), frozenset(labels.items()))] = float(m.group(3))
    return out


def metric(ms, name, **labels):
    return ms[(name, frozenset((k, str(v)) for k, v in labels.items()))]


def histogram(ms, name):
    """[(le, cumulative count)] in bucket order, +Inf last."""
    rows = [(dict(k[1])["le"], v) for k, v in ms.items() if k[0] == name + "_bucket"]
    return sorted(rows, key=lambda r: float("inf") if r[0] == "+Inf" else float(r[0]))


def wait_idle(server, timeout=30):
    """Waits until nothing runs or waits and every KV block is free; returns the metrics."""
    deadline = time.time() + timeout
    while True:
        ms = server.metrics()
        idle = (metric(ms, "vllm:num_requests_running") == 0 and metric(ms, "vllm:num_requests_waiting") == 0
                and metric(ms, "dsv4:kv_blocks_free") == metric(ms, "dsv4:kv_blocks_total"))
        if idle or time.time() > deadline:
            return ms
        time.sleep(0.05)


def check(cond, msg=""):
    if not cond:
        raise AssertionError(msg)


def run_tests(tests):
    """Runs (name, fn) pairs in order, reports each, exits non-zero on the first failure."""
    for name, fn in tests:
        t0 = time.time()
        try:
            fn()
        except Exception:
            print(f"FAIL {name}", flush=True)
            raise
        print(f"ok   {name} ({time.time() - t0:.1f} s)", flush=True)
