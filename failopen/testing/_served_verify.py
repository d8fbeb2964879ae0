"""What every fake verify API shares about being served: in process, on loopback, and its URL.

:class:`~failopen.testing.FakeVerifyAPI` (the spec's vendor) and each captcha vendor's fake
(:mod:`failopen.testing.providers`) answer requests with their own ``handler``; how that handler
reaches a client, with or without ``/_control``, is the same for all of them, and so are the
faults that deliver the vendor's own answer badly (``slow_drip``, ``truncated``).
"""

from __future__ import annotations

import httpx

from failopen.testing._server import FakeRequest, Handler, LoopbackServer, Reply, as_transport

__all__ = ["DRIP_INTERVAL", "ServedVerifyAPI", "delivered_badly"]

#: Seconds between the bytes of a ``slow_drip`` answer.
DRIP_INTERVAL = 0.05


def delivered_badly(reply: Reply, fault: str) -> Reply:
    """``reply`` (the answer the vendor would give) as ``slow_drip`` or ``truncated`` sends it."""
    if fault == "slow_drip":
        reply.drip = DRIP_INTERVAL
    else:
        reply.truncate = True
    return reply


class ServedVerifyAPI:
    """Serving for a fake verify API: subclasses set :attr:`path` and answer in :meth:`handler`,
    and set ``server`` and ``_verify_url`` to None in their constructor."""

    path: str
    server: LoopbackServer | None
    _verify_url: str | None

    def handler(self, request: FakeRequest) -> Reply:
        """Answer one request; serve it with :meth:`transport` or :meth:`serve`."""
        raise NotImplementedError

    def transport(self) -> httpx.MockTransport:
        """This fake as an in-process httpx transport (sync and async)."""
        return as_transport(self.handler)

    def serve(self, port: int = 0, *, control: bool = False) -> LoopbackServer:
        """This fake on a started loopback server, also kept as :attr:`server`; see :attr:`url`.

        ``control=True`` also answers ``GET``/``POST /_control`` (:mod:`failopen.testing.control`).
        """
        handler: Handler = self.handler
        if control:
            from failopen.testing.control import VerifyAPIControls, with_control

            handler = with_control(handler, VerifyAPIControls(self))  # type: ignore[arg-type]
        self.server = LoopbackServer(handler, port=port).start()
        self._verify_url = None
        return self.server

    @property
    def url(self) -> str:
        """Base URL of the latest :meth:`serve`; RuntimeError before."""
        if self.server is None:
            raise RuntimeError(f"{type(self).__name__} is not served: call serve() first")
        return self.server.url

    @property
    def verify_url(self) -> str:
        """:attr:`url` + :attr:`path`: the ``FAILOPEN_VERIFY_URL`` of the served fake."""
        if self._verify_url is not None:
            return self._verify_url
        return self.url + self.path

    @verify_url.setter
    def verify_url(self, value: str) -> None:
        """Point it elsewhere (e.g. your own server of :meth:`handler`) until the next serve()."""
        self._verify_url = value
