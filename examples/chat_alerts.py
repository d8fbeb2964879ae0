"""Post failopen's flag transitions to a chat webhook (Slack-style ``{"text": ...}``).

    import os
    from failopen import FailOpen
    from examples.chat_alerts import chat_alert   # or copy this file into your project

    fo = FailOpen.from_env()
    fo.on_change(chat_alert(os.environ["CHAT_WEBHOOK_URL"], site="shop.example.com"))

``on_change`` calls the callback on failopen's own listener thread, so the post (up to
``timeout`` seconds) never holds a request or the status watcher. The callback never raises:
a failed post is logged without the webhook URL, which is a credential.

Every process of a site has its own flag and calls its own callbacks: with four gunicorn workers,
four messages. In fleet mode (a ``redis://`` store) pass ``runtime=fo``: only the process that
polls the status page for the fleet posts (every process sees the same changes, overrides
included, within a second).
"""

from __future__ import annotations

import logging
from typing import Any

import httpx

from failopen import FailOpen, FlagState

__all__ = ["ChatAlert", "chat_alert", "describe"]

logger = logging.getLogger("examples.chat_alerts")


def describe(old: FlagState, new: FlagState, site: str = "") -> str | None:
    """The message for a change worth a human's attention, else None."""
    where = f" on {site}" if site else ""
    if old.enforce and not new.enforce:
        until = f", until {new.to_dict()['expires_at']}" if new.expires_at is not None else ""
        return (f":warning: failopen{where}: bot protection is OFF ({new.source}: {new.reason}"
                f"{until}). Requests are admitted without a challenge.")
    if not old.enforce and new.enforce:
        return f":white_check_mark: failopen{where}: bot protection is back ON ({new.reason})."
    if new.stale and not old.stale:
        return (f":grey_question: failopen{where}: the vendor's status page has not been "
                f"readable for a while ({new.error or 'no error recorded'}); the flag keeps "
                f"enforce={new.enforce}.")
    return None


class ChatAlert:
    """An ``on_change`` callback that posts each transition to a webhook; never raises."""

    def __init__(
        self,
        webhook_url: str,
        *,
        site: str = "",
        timeout: float = 5.0,
        runtime: FailOpen | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._url = webhook_url
        self._site = site
        self._runtime = runtime
        self._client = httpx.Client(timeout=timeout, transport=transport, follow_redirects=False)

    def __repr__(self) -> str:
        return f"ChatAlert(site={self._site!r})"  # never the URL: it is a credential

    def __call__(self, old: FlagState, new: FlagState) -> None:
        text = describe(old, new, self._site)
        if text is None or not _should_post(self._runtime):
            return
        try:
            response = self._client.post(self._url, json={"text": text})
        except httpx.HTTPError as exc:
            # The exception's text may hold the URL; its type is enough to act on.
            logger.warning("chat alert not delivered: %s", type(exc).__name__)
            return
        if response.status_code >= 300:
            logger.warning("chat alert not delivered: the webhook answered HTTP %d",
                           response.status_code)

    def close(self) -> None:
        """Release the connection (at shutdown)."""
        self._client.close()


def chat_alert(webhook_url: str, **options: Any) -> ChatAlert:
    """A :class:`ChatAlert` for ``fo.on_change(...)``; options as ChatAlert's."""
    return ChatAlert(webhook_url, **options)


def _should_post(runtime: FailOpen | None) -> bool:
    if runtime is None or runtime.fleet is None or runtime.status is None:
        return True  # no fleet, or nobody polls for it: each process speaks for itself
    return runtime.fleet.leader
