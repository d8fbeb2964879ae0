"""The decision: whether a protected request is checked, and on what evidence it is not.

- :mod:`~failopen.engine.flag`: the one enforcement flag, read lock-free by every request,
  and :mod:`~failopen.engine.flag_state`: the state it publishes;
- :mod:`~failopen.engine.guard`: a request's decision (:class:`~failopen.engine.guard.Decision`),
  with :mod:`~failopen.engine.confirm` for the rare on-demand outage check;
- :mod:`~failopen.engine.watcher`: the status poller that drives the flag, with
  :mod:`~failopen.engine.hysteresis` for what its readings add up to,
  :mod:`~failopen.engine.readings` for the rules it applies to them,
  :mod:`~failopen.engine.turns` for what it asks of the fleet and the probe, and
  :mod:`~failopen.engine.first_reading` for a worker's first turn;
- :mod:`~failopen.engine.probe`: the opt-in verify probe (its shared record in
  :mod:`~failopen.engine.probe_record`, and :mod:`~failopen.engine.outcome_window` for the
  requests' verify outcomes it weighs);
- :mod:`~failopen.engine.fleet`: one flag and one poller for many processes through Redis;
- :mod:`~failopen.engine.listeners`: callbacks on flag changes, off the request path.

The engine reads the vendor's answers (``failopen.providers``), keeps overrides in a store
(``failopen.stores``) and reports through ``failopen.observe``; it never imports an adapter.
"""

from __future__ import annotations

__all__: list[str] = []
