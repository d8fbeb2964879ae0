"""Review of issue 20 ("Degrade, don't open"): attacks on the outage policy, as regressions."""

from __future__ import annotations

import pytest

pytest.importorskip("limits")

from failopen.fallback import OutageRateLimit  # noqa: E402


def test_one_ipv6_host_cannot_escape_the_outage_rate_limit_by_changing_address() -> None:
    """A host gets a whole /64 (2^64 addresses): counted per address, each request could come
    from a new one and the limit would never apply."""
    limit = OutageRateLimit("1/minute")
    limit.hit("2001:db8:1:2::1", "/signup")
    assert limit.test("2001:db8:1:2::ffff:9", "/signup") is not None
    # Another /64 is another client; IPv4 clients keep one bucket each.
    assert limit.test("2001:db8:1:3::1", "/signup") is None
    limit.hit("203.0.113.5", "/signup")
    assert limit.test("203.0.113.6", "/signup") is None


def test_ipv4_mapped_peers_keep_one_bucket_each() -> None:
    """A dual-stack socket shows IPv4 clients as ::ffff:a.b.c.d: they all lie in one /64."""
    limit = OutageRateLimit("1/minute")
    limit.hit("::ffff:203.0.113.5", "/signup")
    assert limit.test("::ffff:203.0.113.6", "/signup") is None
    assert limit.test("203.0.113.5", "/signup") is not None


def test_a_concurrent_burst_cannot_slip_over_the_outage_rate_limit_together() -> None:
    import threading

    from failopen.engine.outage import OutageGate
    from failopen.fallback import OutageRateLimit

    class EveryoneTestsFirst(OutageRateLimit):
        """The real limit, with every request's first check made before anyone is counted:
        the widest the window between the check and the count can ever be."""

        def __init__(self, rate: str, threads: int) -> None:
            super().__init__(rate)
            self.barrier = threading.Barrier(threads)

        def test(self, client: str, route: str) -> int | None:
            answer = super().test(client, route)
            self.barrier.wait(5)
            return answer

    threads = 10
    gate = OutageGate(rate=EveryoneTestsFirst("3/minute", threads))
    answers: list[object] = []

    def request() -> None:
        answers.append(gate.refuse("open", route="/login", client="203.0.113.7", solution=None,
                                   off_since=0.0))

    workers = [threading.Thread(target=request) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(10)
    assert answers.count(None) == 3
    assert len(answers) == threads
