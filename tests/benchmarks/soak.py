"""Chaos soak: the real servers, a real Redis and the test kit's fakes, under a seeded schedule of
every fault, with continuous traffic of known truth, judged request by request by an oracle.

    python tests/benchmarks/soak.py --minutes 2 --seed 1          # CI's run: about 2½ min
    python tests/benchmarks/soak.py --minutes 30 --seed 7 --json report.json
    python tests/benchmarks/soak.py --minutes 2 --seed 1 --sentinel   # on Redis Sentinel

Runs the Django example under gunicorn (2 workers) and the ASGI example under uvicorn (2
workers, with the verify probe), one fleet on one ``redis-server`` (FAILOPEN_STORE=redis://...),
against ``failopen emulate status`` and ``failopen emulate verify``. With ``--sentinel`` the
store is a ``redis+sentinel://`` URL over a primary, a replica and one sentinel (_soak_sentinel),
the Redis faults act on the current primary, and a failover fault is added. Exit 0 when the
report shows no violation, 1 otherwise, 2 when the soak could not run. See docs/performance.md,
"Chaos soak".

Modules: _soak_schedule (knobs, tolerances, the seeded schedule), _soak_fleet (the processes),
_soak_inject (plays the schedule), _soak_traffic (the clients), _soak_oracle (the verdicts),
_soak_report (the figures).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import secrets
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

from _soak_fleet import FALLBACK_SECRET, PRIVATE_KEY, Fleet
from _soak_inject import Injector
from _soak_oracle import Oracle
from _soak_report import Measures, build_report, render
from _soak_schedule import Knobs, build_schedule
from _soak_traffic import Traffic

PROBE_APP = "asgi"
#: After the last fault ends, traffic goes on this long (every recovery has its tolerance).
SETTLE = 8.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=2.0,
                        help="length of the fault schedule (at least 2 covers every fault kind)")
    parser.add_argument("--seed", type=int, default=1, help="the same seed, the same schedule")
    parser.add_argument("--json", metavar="FILE", help="also write the report as JSON ('-': "
                        "stdout instead of the text report)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the run's directory (server logs, audit files)")
    parser.add_argument("--schedule", action="store_true",
                        help="print the schedule of this seed and length, and exit")
    parser.add_argument("--mismatch", metavar="NAME=VALUE", action="append", default=[],
                        help="a negative control: give the servers FAILOPEN_NAME=VALUE while the "
                        "oracle keeps the soak's knob (e.g. CLOSE_AFTER=6: the soak must fail)")
    parser.add_argument("--vendor", default="enforcement",
                        help="the captcha vendor the servers verify with (FAILOPEN_VENDOR; its "
                        "fake from `failopen emulate verify --vendor`): the same oracle holds")
    parser.add_argument("--sentinel", action="store_true",
                        help="run the fleet on Redis Sentinel (a primary, a replica, a sentinel: "
                        "FAILOPEN_STORE=redis+sentinel://...), adding a failover fault")
    return parser.parse_args(argv)


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    seconds = args.minutes * 60
    schedule = build_schedule(args.seed, seconds, sentinel=args.sentinel)
    if args.schedule:
        for fault in schedule:
            print(f"{fault.start:7.1f}s .. {fault.end:7.1f}s  {fault.kind}  {fault.detail or ''}")
        return 0
    if shutil.which("redis-server") is None:
        print("soak: redis-server is not installed (apt-get install redis-server)",
              file=sys.stderr)
        return 2
    # A SIGTERM (kill, a CI timeout) unwinds through the finally below, which stops the servers,
    # Redis and the fakes: without it they outlive the soak, holding their ports.
    signal.signal(signal.SIGTERM, _terminated)
    knobs = Knobs()
    directory = Path(tempfile.mkdtemp(prefix="failopen-soak-"))
    servers_env = knobs.env()
    for item in args.mismatch:
        name, _, value = item.partition("=")
        servers_env[name.upper().removeprefix("FAILOPEN_")] = value
    fleet = Fleet(directory, PROBE_APP, servers_env, knobs.probe_env(), sentinel=args.sentinel,
                  vendor=args.vendor)
    measures = Measures()
    started = time.monotonic()
    try:
        fleet.start()
    except Exception as exc:
        fleet.stop()
        print(f"soak: could not start the fleet: {exc}", file=sys.stderr)
        return 2
    print(f"soak: fleet up in {time.monotonic() - started:.1f} s ({directory}); "
          f"{len(schedule)} faults over {schedule[-1].end:.0f} s", flush=True)
    measures.audit_files = {name: app.audit for name, app in fleet.apps.items()}
    t0 = time.monotonic()

    def now() -> float:
        return time.monotonic() - t0

    traffic = Traffic(fleet.apps, private_key=PRIVATE_KEY, t0=t0, seed=args.seed,
                      run_id=secrets.token_hex(3), vendor=args.vendor)
    injector = Injector(fleet, schedule, now)
    stop_sampling = threading.Event()
    sampler = threading.Thread(target=_sample, args=(fleet, measures, now, stop_sampling),
                               name="soak-sampler", daemon=True)
    try:
        sampler.start()
        traffic.start()
        injector.start()
        end = max(seconds, max(f.end for f in schedule) + SETTLE)
        last_said = 0.0
        while now() < end:
            time.sleep(1)
            if now() - last_said >= 30:
                last_said = now()
                print(f"soak: {now():5.0f} s, {len(traffic.records)} requests", flush=True)
        injector.stop()
        traffic.stop()
        stop_sampling.set()
        sampler.join(10)
        ran = now()
        time.sleep(1.5)  # the audit writers' queues drain in the background
    finally:
        injector.stop()
        traffic.stop()
        stop_sampling.set()
        fleet.stop()
    measures.injector_errors = injector.errors
    oracle = Oracle(injector.applied, knobs, probe_app=PROBE_APP)
    report = build_report(records=traffic.records, oracle=oracle, schedule=schedule,
                          applied=injector.applied, measures=measures, flag_at=traffic.flag_at,
                          seconds=ran, seed=args.seed, minutes=args.minutes,
                          sentinel=args.sentinel)
    if args.vendor != "enforcement":  # the run another vendor's fake answered
        report["command"] += f" --vendor {args.vendor}"
    report["faults"] = [_shown(f) for f in sorted(injector.applied, key=lambda f: f.start)]
    report["run_directory"] = str(directory) if args.keep else None
    report["mismatch"] = args.mismatch
    shown = json.dumps(report, indent=1, sort_keys=True, default=str)
    if args.json == "-":
        print(_scrubbed(shown))
    else:
        print(_scrubbed(render(report)))
        if args.json:
            Path(args.json).write_text(_scrubbed(shown))
    if not args.keep:
        shutil.rmtree(directory, ignore_errors=True)
    return 0 if report["ok"] else 1


def _scrubbed(text: str) -> str:
    """The report never shows the soak's secrets, whatever a reason or an error quoted (test
    values, but a report is pasted into issues and docs)."""
    for secret in (PRIVATE_KEY, FALLBACK_SECRET):
        text = text.replace(secret, "***")
    return text


def _sample(fleet: Fleet, measures: Measures, now: object, stop: threading.Event) -> None:
    """Every second the status page's request count; every 5 s each worker's VmRSS."""
    assert callable(now)
    tick = 0
    while not stop.wait(1.0):
        tick += 1
        # A missed sample only widens the interval between two others.
        with contextlib.suppress(Exception):
            measures.status_counts.append((now(), fleet.status_requests()))
        with contextlib.suppress(Exception):  # Redis may be down or paused: no sample then
            found = fleet.leader()
            measures.leaders.append((now(), None if found is None else found[0]))
        if tick % 5 == 0:
            t = now()
            measures.rss.extend((t, app, pid, kb) for app, pid, kb in fleet.worker_rss())


def _shown(fault: object) -> dict[str, object]:
    from _soak_inject import describe

    return describe(fault)  # type: ignore[arg-type]


if __name__ == "__main__":
    sys.exit(main())
