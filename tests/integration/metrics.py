"""Reads the broker's Prometheus endpoint."""
import re
import urllib.request

from broker import free_port
from waiting import wait_until


def metrics_config(extra=""):
    """A config enabling the metrics endpoint on a free port, and that endpoint's address."""
    port = free_port()
    return f'metrics_listen = "127.0.0.1:{port}"\n' + extra, f"127.0.0.1:{port}"


def scrape(addr: str) -> dict:
    """{(name, labels-string): value}"""
    text = urllib.request.urlopen(f"http://{addr}/metrics", timeout=5).read().decode()
    out = {}
    for line in text.splitlines():
        m = re.match(r"^(\w+)(?:\{([^}]*)\})? (\d+)$", line)
        if m:
            out[(m.group(1), m.group(2) or "")] = int(m.group(3))
    return out


def total(addr: str, name: str, **labels) -> int:
    want = [f'{k}="{v}"' for k, v in labels.items()]
    return sum(v for (n, l), v in scrape(addr).items() if n == name and all(w in l for w in want))


def wait_for_more(addr: str, name: str, n: int = 2, timeout_s: float = 60):
    """Waits until counter `name` grew by `n` on every shard from now. For a counter of passes
    (retention, the cleaner), n = 2 means a whole pass of each shard began after this call."""
    def series():
        return {labels: v for (m, labels), v in scrape(addr).items() if m == name}
    start = series()
    assert start, f"no {name} on {addr}"
    wait_until(lambda: all(series()[labels] >= v + n for labels, v in start.items()), timeout_s,
               f"{n} more {name} on every shard", state=series)
