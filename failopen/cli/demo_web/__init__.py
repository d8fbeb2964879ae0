"""``failopen demo --web``: the outage in a browser, on 127.0.0.1, until Ctrl-C.

One command, no configuration: the test kit's fakes (status page, verify API, vendor script) on
loopback ports of their own, and a Starlette site (log-in, sign-up, password reset, each with its
own outage policy) guarded by failopen's ASGI middleware under uvicorn in this process. The page
(``page.html``) polls the flag endpoint and ``/demo/state``; its buttons change the fakes and
place the operator's override. Needs
``starlette`` and ``uvicorn`` (``pip install "failopen[demo]"``); the sign-up and password-reset
forms need ``failopen[fallback]`` too (without it, the log-in alone, and a line naming the extra).

``vendor`` (``--vendor NAME``) puts another vendor's fakes behind the same page: its verify API,
its browser script (the visitor sees that vendor's widget through failopen.js) and its status page
where it has one, else the verify probe as the evidence (:mod:`._stages`).
"""

from __future__ import annotations

import signal
import socket
import sys
import threading
import time
from typing import Any, TextIO

from failopen.fallback.settings import INSTALL
from failopen.providers.registry import DEFAULT_VENDOR

__all__ = ["DEFAULT_PORT", "run_web_demo"]

DEFAULT_PORT = 8400
EXIT_USAGE = 2
_STARTUP_SECONDS = 30.0


def _missing_dependency() -> str | None:
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        return (f"failopen demo --web needs starlette and uvicorn ({exc.name} is missing): "
                'pip install "failopen[demo]"')
    return None


def _listen(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1", port))  # loopback only: the demo drives fakes and overrides
    except OSError:
        sock.close()
        raise
    return sock


def run_web_demo(
    *, port: int = DEFAULT_PORT, out: TextIO | None = None, stop: threading.Event | None = None,
    poll_interval: float | None = None, vendor: str = DEFAULT_VENDOR,
) -> int:
    """Serve the web demo on ``127.0.0.1:port`` (0: a free port) with ``vendor``'s fakes until
    SIGINT/SIGTERM, or until ``stop`` is set when one is given (then no signal handler is
    touched). Returns the exit code: 0 after a clean stop, 2 when a dependency is missing or the
    port cannot be bound."""
    out = out if out is not None else sys.stdout
    missing = _missing_dependency()
    if missing is not None:
        print(missing, file=sys.stderr)
        return EXIT_USAGE
    import uvicorn

    from failopen.cli.demo_web._app import build_app
    from failopen.cli.demo_web._site import POLL_INTERVAL, DemoSite

    try:
        sock = _listen(port)
    except OSError as exc:
        print(f"failopen demo --web: cannot listen on 127.0.0.1:{port}: {exc.strerror or exc}; "
              "pick another with --port N (0: any free port)", file=sys.stderr)
        return EXIT_USAGE
    site = DemoSite(poll_interval=POLL_INTERVAL if poll_interval is None else poll_interval,
                    vendor=vendor)
    handlers: dict[signal.Signals, Any] = {}
    try:
        site.start()
        config = uvicorn.Config(build_app(site), lifespan="on", log_level="warning",
                                access_log=False, timeout_graceful_shutdown=2)
        server = uvicorn.Server(config)
        # In a worker thread uvicorn installs no signal handlers: Ctrl-C stays ours, and ends
        # the demo with a clean exit 0 instead of a re-raised KeyboardInterrupt.
        worker = threading.Thread(target=server.run, kwargs={"sockets": [sock]},
                                  name="failopen.demo-web", daemon=True)
        if stop is None:
            stop = stopped = threading.Event()
            for signum in (signal.SIGINT, signal.SIGTERM):
                handlers[signum] = signal.signal(signum, lambda *_: stopped.set())
        worker.start()
        deadline = time.monotonic() + _STARTUP_SECONDS
        while not server.started and worker.is_alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        if not server.started:
            server.should_exit = True
            print("failopen demo --web: the server did not start", file=sys.stderr)
            return EXIT_USAGE
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/"
        urls = site.fake_urls
        forms = ", ".join(f"{form.path} {site.policies.get(form.name)}" for form in site.forms)
        missing = "" if site.fallback_missing is None else (
            "  the sign-up (fallback) and password-reset (closed) forms need the fallback "
            f"extra: {INSTALL}\n")
        fakes = (
            f"  fakes: status page {urls['status']}, verify API {urls['verify']}, "
            f"vendor script {urls['vendor']}\n"
            f"  they take `failopen emulate status --url {urls['status']} "
            "--set global=major_outage` too\n"
        ) if site.stage is None else "".join(f"{line}\n" for line in site.stage.startup_lines())
        out.write(
            f"failopen demo --web: open {url}  (Ctrl-C to stop)\n{fakes}"
            f"  forms and their outage policies: {forms}\n{missing}"
        )
        out.flush()
        stop.wait()
        server.should_exit = True
        worker.join(timeout=10)
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
        site.stop()
        sock.close()
    out.write("failopen demo --web: stopped\n")
    out.flush()
    return 0
