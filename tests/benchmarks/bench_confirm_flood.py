"""An unprotected page during a flood on fresh workers whose status page hangs (issue 31, item 8).

    python tests/benchmarks/bench_confirm_flood.py           # about 40 s; prints a Markdown table
    python tests/benchmarks/bench_confirm_flood.py --quick   # fewer samples (about 30 s)

The Flask example (``examples/flask_app.py``) under real ``gunicorn -k gthread --workers 2
--threads 4``, its status page the in-process fake holding every request (the ``timeout`` fault),
so each worker's first poll is under way for the whole status timeout. Each row starts a fresh
server, then 24 threads flood it, each request on a new connection, while this process times
``GET /`` (an unprotected page) one request after another:

* ``no flood``: the baseline, the same fresh workers and hanging page;
* ``?confirm=1`` flood: ``GET /failopen/flag?confirm=1``, what the snippet asks after its retries;
* ``token-less log-in`` flood: ``POST /login`` without a token, each of which wants the first
  reading too.

Pinned: ``FAILOPEN_STATUS_TIMEOUT=5``, ``FAILOPEN_POLL_INTERVAL=30``, ``FAILOPEN_POLL_JITTER=0``,
``FAILOPEN_CONFIRM_WAIT`` at its default (0.25 s), ``FAILOPEN_OUTAGE_RATE=20/minute`` (the
default; nothing is bypassed, so it counts nothing). Every sample is taken within the status
timeout of the workers' start, while their first polls are held: before the fix each flood held
all eight threads and ``GET /`` waited about the whole status timeout (4.8-5.5 s measured).
Goal: the flood rows' median within a few times the baseline, far below the status timeout.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "integrations")]

from _serving import fakes_env, served  # noqa: E402

from failopen.testing import FakeStatusPage, FakeVerifyAPI, free_port  # noqa: E402

WORKERS, THREADS, FLOODERS = 2, 4, 24
STATUS_TIMEOUT = 5.0
SETTINGS = {"STATUS_TIMEOUT": str(STATUS_TIMEOUT), "POLL_INTERVAL": "30", "POLL_JITTER": "0",
            "OUTAGE_RATE": "20/minute"}


def _flood(url: str, kind: str, stop: threading.Event) -> None:
    with httpx.Client(base_url=url, timeout=STATUS_TIMEOUT * 3) as client:
        while not stop.is_set():
            try:
                if kind == "confirm":
                    client.get("/failopen/flag", params={"confirm": "1"},
                               headers={"Connection": "close"})
                else:
                    client.post("/login", data={"username": "x"},
                                headers={"Connection": "close", "Accept": "application/json"})
            except httpx.HTTPError:
                return


def _row(kind: str, samples: int) -> list[float]:
    """Seconds each ``GET /`` took, on fresh workers, during a flood of ``kind``."""
    page, api = FakeStatusPage(), FakeVerifyAPI()
    with page.serve(), api.serve(), tempfile.TemporaryDirectory() as tmp:
        page.set_fault("timeout")
        port = free_port()
        argv = [sys.executable, "-m", "gunicorn", "-k", "gthread", "--workers", str(WORKERS),
                "--threads", str(THREADS), "-b", f"127.0.0.1:{port}", "--graceful-timeout", "1",
                "--pythonpath", f"{ROOT / 'examples'},{ROOT / 'tests' / 'integrations'}",
                "_gunicorn_flask:app"]
        with served(argv, port=port, env=fakes_env(page, api, **SETTINGS),
                    log_path=Path(tmp) / "gunicorn.log", ready_path="/health",
                    cwd=Path(tmp)) as url:
            stop = threading.Event()
            threads = [threading.Thread(target=_flood, args=(url, kind, stop), daemon=True)
                       for _ in range(FLOODERS if kind != "none" else 0)]
            for thread in threads:
                thread.start()
            with httpx.Client(base_url=url, timeout=STATUS_TIMEOUT * 3) as client:
                client.get("/failopen/flag", headers={"Connection": "close"})  # start a poll
                deadline = time.monotonic() + 10
                while page.requests < WORKERS and time.monotonic() < deadline:
                    client.get("/failopen/flag", headers={"Connection": "close"})
                started = time.monotonic()
                took: list[float] = []
                # Only while the first polls are held: after the status timeout the workers
                # have a reading (an error), and the row would measure something else.
                while len(took) < samples and time.monotonic() - started < STATUS_TIMEOUT - 1:
                    begin = time.perf_counter()
                    client.get("/", headers={"Connection": "close"})
                    took.append(time.perf_counter() - begin)
            stop.set()
    return took


def main() -> None:
    samples = 5 if "--quick" in sys.argv else 15
    rows = {name: _row(kind, samples) for name, kind in
            (("no flood", "none"), ("?confirm=1 flood", "confirm"),
             ("token-less log-in flood", "login"))}
    base = statistics.median(rows["no flood"])
    print(f"\nGET / on fresh gunicorn gthread workers ({WORKERS}x{THREADS}), status page "
          f"hanging, status timeout {STATUS_TIMEOUT:g} s, {FLOODERS} flooding threads\n")
    print("| row | samples | median | max | median / no flood |")
    print("|---|---:|---:|---:|---:|")
    for name, took in rows.items():
        if not took:
            print(f"| {name} | 0 | - | - | - (no sample within the status timeout) |")
            continue
        median = statistics.median(took)
        print(f"| {name} | {len(took)} | {median * 1000:.1f} ms | {max(took) * 1000:.1f} ms "
              f"| {median / base:.1f}x |")


if __name__ == "__main__":
    main()
