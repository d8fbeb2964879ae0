"""Which request comes next in a list call: windows of at most 30 days, the cursor in each."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, Generic, TypeVar

from failopen.rai._arguments import (
    API_PREFIX,
    Instant,
    Params,
    check_id,
    check_int,
    check_page_size,
    check_public_keys,
    check_window,
    cohort_path,
    format_rfc3339,
    parse_rfc3339,
    split_window,
)
from failopen.rai._base import DEFAULT_MAX_PAGES, decode_page
from failopen.rai.exceptions import InvalidResponse, RaiValidationError
from failopen.rai.models import Cohort, Page, Session

__all__ = [
    "Pager", "Record", "SLIM_FIELDS", "cohorts_pager", "sessions_pager", "cohort_sessions_pager",
    "peek_cursor", "MAX_EMPTY_PAGES", "DEFAULT_MAX_PAGES", "BOUNDARY_FIELDS",
]  # fmt: skip

T = TypeVar("T")


Record = dict[str, Any]
"""One record of a list answer, exactly as decoded."""

#: Empty pages in a row that still carry a ``next_page_token``: a service that has nothing to
#: send keeps no listing open for more (a hostile one answered that way forever).
MAX_EMPTY_PAGES = 100

_CURSOR = b'"next_page_token"'
_WS = b" \t\r\n"


def peek_cursor(content: bytes) -> str | None:
    """The ``next_page_token`` of a list answer read from its raw bytes, without decoding it.

    "" when the answer seems to have none (the last page), None when it cannot be read this way
    (escapes, another type). Only a guess: the last member named so wins, and a record may hold
    a nested object with that name, so the decoded page has the last word (:meth:`Pager.after`).
    """
    at = content.rfind(_CURSOR)
    if at < 0:
        return ""
    i, n = at + len(_CURSOR), len(content)
    while i < n and content[i] in _WS:
        i += 1
    if content[i : i + 1] != b":":
        return None
    i += 1
    while i < n and content[i] in _WS:
        i += 1
    if content.startswith(b"null", i):
        return ""
    if content[i : i + 1] != b'"':
        return None
    end = content.find(b'"', i + 1)
    token = content[i + 1 : end]
    if end < 0 or b"\\" in token:
        return None
    try:
        return token.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _digest(token: str) -> bytes:
    return hashlib.blake2b(token.encode("utf-8", "surrogatepass"), digest_size=16).digest()


class _End:
    """The end (``to``) of one window: whether a record's times reach it."""

    def __init__(self, window: Params) -> None:
        self.text = dict(window)["to"]  # format_rfc3339: YYYY-MM-DDTHH:MM:SS[.ffffff]Z
        self.second = self.text[:19]
        self.moment = parse_rfc3339(self.text)

    def reached(self, record: Record, fields: tuple[str, ...]) -> bool:
        """True when one of ``fields`` is at or after the end, or missing or unreadable: the
        record may come back in the next window. Its whole second is compared when it is in
        UTC (``Z``): a record in the end's own second counts as reaching it."""
        for name in fields:
            value = record.get(name)
            if type(value) is str and len(value) >= 20 and value[10] == "T" and value[-1] == "Z":
                if value[:19] >= self.second:
                    return True
                continue
            try:
                if not isinstance(value, str) or parse_rfc3339(value) >= self.moment:
                    return True
            except RaiValidationError:
                return True
        return not fields


class Pager(Generic[T]):
    """Which request comes next in one list call: the windows in order, the cursor within each.

    A page goes through three steps, so the next request can leave as early as possible:
    :meth:`decode` (on the fetching thread: JSON, cursor and envelope checks), then on the
    consumer's side :meth:`deliver` and :meth:`after` (the next request may leave now), and only
    then :meth:`build`, the typed models, skipped by raw iteration.

    Windows share their boundary instant and the service's treatment of ``to`` is not specified,
    so a record may come back in two adjacent windows; :meth:`deliver` drops a record the
    previous window delivered (cohorts by ``cohort_id``, sessions by ``session_id`` and
    ``cohort_id``). Only the ids of records that can come back are kept: those with a time at or
    after their window's end (:data:`BOUNDARY_FIELDS`: any of a cohort's, as the spec does not
    say which one the service filters on), or with none readable. Keeping every id of a window
    held 1M sessions' ids through a 31-day listing (295 MB against 46 MB over 30 days); none are
    kept when there is one window.
    Within a window, a ``next_page_token`` seen before is an error, not an endless loop; so are
    :data:`MAX_EMPTY_PAGES` empty pages in a row that still carry a token, and more than
    :attr:`max_pages` pages (fresh tokens from a broken or hostile service). :meth:`after` raises
    before the request that would pass a bound, so the pipelined pager sends one at most.
    """

    def __init__(
        self,
        path: str,
        windows: list[Params],
        key: str,
        parse_item: Callable[[Mapping[str, Any]], T],
        identity: Callable[[Record], Hashable | None],
        boundary_fields: tuple[str, ...] = (),
    ) -> None:
        self.path = path
        self.key = key
        self.parse_item = parse_item
        self._windows = windows
        self._identity = identity if len(windows) > 1 else None
        self._fields = boundary_fields
        #: Set by :meth:`Client.export_pages`: the only fields kept of a record whose text is in
        #: the page's ``lines`` (never for pages that become models).
        self.keep: tuple[str, ...] | None = None
        #: Set by the client (its ``max_pages``): the most pages one window may take.
        self.max_pages = DEFAULT_MAX_PAGES
        self._pages = 0  # in the current window
        self._empty = 0  # empty pages in a row with a token, in the current window
        self._index = 0
        # Digests of the window's tokens, not the tokens: a service sending huge tokens would
        # otherwise hold max_pages of them in memory.
        self._tokens: set[bytes] = set()
        self._previous: set[Hashable] = set()  # the previous window's, that may come back
        self._current: set[Hashable] = set()  # this window's, that may come back in the next
        self._end = _End(self._windows[0]) if self._identity is not None else None

    @property
    def remembered(self) -> int:
        """Ids held to drop the records two windows share: a few, however long the listing."""
        return len(self._previous) + len(self._current)

    def first(self) -> Params:
        """The parameters of the first request."""
        return list(self._windows[0])

    def decode(self, content: bytes) -> Page[Record]:
        """A page of records from a list answer's body (safe to call off the consumer's thread)."""
        return decode_page(content, self.key, self.keep)

    def deliver(self, page: Page[Record]) -> Page[Record]:
        """The page as the consumer sees it: records the previous window delivered removed."""
        if self._identity is None:
            return page
        identity, previous, end = self._identity, self._previous, self._end
        kept = []
        for index, record in enumerate(page.items):
            if end is not None and end.reached(record, self._fields):
                ident = identity(record)
                if ident is not None:
                    # Noted even when dropped below, so the next window knows it too.
                    self._current.add(ident)
            if previous and identity(record) in previous:
                continue
            kept.append(index)
        if len(kept) == len(page.items):
            return page
        lines = page.lines
        return Page([page.items[i] for i in kept], page.next_page_token, page.schema_version,
                    None if lines is None else [lines[i] for i in kept])  # fmt: skip

    def after(self, page: Page[Record]) -> Params | None:
        """The parameters of the request after ``page``; None when the listing is complete."""
        token = page.next_page_token
        if token:
            digest = _digest(token)
            if digest in self._tokens:
                raise InvalidResponse(
                    f"list of {self.key}: the service returned a next_page_token it had "
                    "already returned; stopping instead of looping forever"
                )
            self._tokens.add(digest)
            self._check_progress(page)
            return [*self._windows[self._index], ("page_token", token)]
        self._index += 1
        if self._index >= len(self._windows):
            return None
        self._tokens.clear()
        self._pages = self._empty = 0
        self._previous, self._current = self._current, set()
        last = self._index == len(self._windows) - 1  # no window after it to repeat a record
        self._end = None if last else _End(self._windows[self._index])
        return list(self._windows[self._index])

    def _check_progress(self, page: Page[Record]) -> None:
        """InvalidResponse when the page, which asks for one more, passes a bound."""
        self._pages += 1
        self._empty = 0 if page.items else self._empty + 1
        if self._empty >= MAX_EMPTY_PAGES:
            raise InvalidResponse(
                f"list of {self.key}: {MAX_EMPTY_PAGES} empty pages in a row{self._where()}, "
                "each with a next_page_token; stopping: the service is not making progress"
            )
        if self._pages >= self.max_pages:
            raise InvalidResponse(
                f"list of {self.key}: {self._pages} pages in one window{self._where()} and the "
                "service still sent a next_page_token; stopping at max_pages (--max-pages in "
                "the CLI): raise it, or ask for a shorter window, if it holds that many records"
            )

    def _where(self) -> str:
        window = dict(self._windows[self._index])
        if "from" in window and "to" in window:
            return f" (window {window['from']} to {window['to']})"
        return ""

    def guess_after(self, params: Params, content: bytes) -> Params | None:
        """The request that most likely follows ``content``, the answer to ``params``, read from
        the raw answer (:func:`peek_cursor`); None when none follows or it cannot be told.

        Pure (safe on the fetching thread): :meth:`after` on the decoded page decides.
        """
        token = peek_cursor(content)
        if token is None:
            return None
        window = params[:-1] if params and params[-1][0] == "page_token" else params
        if token:
            return [*window, ("page_token", token)]
        try:
            index = self._windows.index(window)
        except ValueError:
            return None
        return list(self._windows[index + 1]) if index + 1 < len(self._windows) else None

    def build(self, page: Page[Record]) -> Page[T]:
        """The page with typed models (each keeps its record as ``raw``)."""
        assert self.keep is None, "slim pages cannot become models"
        parse = self.parse_item
        return Page([parse(record) for record in page.items], page.next_page_token,
                    page.schema_version)  # fmt: skip


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


#: What a slim record keeps (:meth:`Client.export_pages`): the ids and the times
#: :meth:`Pager.deliver` reads (:data:`BOUNDARY_FIELDS`), the first of which also orders it into
#: a slice or names its day file.
SLIM_FIELDS = {
    "cohorts": ("cohort_id", "cohort_window_start", "cohort_window_end", "created_at"),
    "sessions": ("session_id", "cohort_id", "session_created"),
}

#: The times of a record the service may filter a window on: a record with one of them at or
#: after its window's end may come back in the next (:class:`Pager`). A cohort's window start,
#: its end (a filter on overlap) or its created_at: the spec says none; a session's creation.
BOUNDARY_FIELDS = {
    "cohorts": ("cohort_window_start", "cohort_window_end", "created_at"),
    "sessions": ("session_created",),
}


# Read from the records, as the models read them, so duplicates are dropped before any model is
# built: a non-string id is no id.
def _cohort_identity(record: Record) -> Hashable | None:
    return _str(record.get("cohort_id"))


def _session_identity(record: Record) -> Hashable | None:
    session_id = _str(record.get("session_id"))
    if session_id is None:
        return None
    return (session_id, _str(record.get("cohort_id")))


def _window_params(
    start: Instant,
    end: Instant,
    public_keys: Sequence[str],
    filters: list[tuple[str, str | int | None]],
    page_size: int | None,
) -> list[Params]:
    first, last = check_window(start, end)
    keys = check_public_keys(public_keys)
    check_page_size(page_size)
    common: Params = [("public_key", key) for key in keys]
    common += [(name, str(value)) for name, value in filters if value is not None]
    if page_size is not None:
        common.append(("page_size", str(page_size)))
    return [
        [("from", format_rfc3339(a)), ("to", format_rfc3339(b)), *common]
        for a, b in split_window(first, last)
    ]


def cohorts_pager(
    start: Instant,
    end: Instant,
    public_keys: Sequence[str],
    *,
    cohort_id: str | None,
    anomaly_id: int | None,
    telltale_id: int | None,
    min_session_count: int | None,
    page_size: int | None,
) -> Pager[Cohort]:
    """The validated plan of a list-cohorts call (spec 4.3)."""
    check_id("cohort_id", cohort_id)
    check_int("anomaly_id", anomaly_id)
    check_int("telltale_id", telltale_id)
    check_int("min_session_count", min_session_count, minimum=0)
    windows = _window_params(
        start, end, public_keys,
        [("cohort_id", cohort_id), ("anomaly_id", anomaly_id), ("telltale_id", telltale_id),
         ("min_session_count", min_session_count)],
        page_size,
    )
    return Pager(f"{API_PREFIX}/cohorts", windows, "cohorts", Cohort.from_dict, _cohort_identity,
                 BOUNDARY_FIELDS["cohorts"])


def sessions_pager(
    start: Instant,
    end: Instant,
    public_keys: Sequence[str],
    *,
    cohort_id: str | None,
    anomaly_id: int | None,
    telltale_id: int | None,
    page_size: int | None,
) -> Pager[Session]:
    """The validated plan of a list-sessions call (spec 4.6)."""
    check_id("cohort_id", cohort_id)
    check_int("anomaly_id", anomaly_id)
    check_int("telltale_id", telltale_id)
    windows = _window_params(
        start, end, public_keys,
        [("cohort_id", cohort_id), ("anomaly_id", anomaly_id), ("telltale_id", telltale_id)],
        page_size,
    )
    return Pager(
        f"{API_PREFIX}/sessions", windows, "sessions", Session.from_dict, _session_identity,
        BOUNDARY_FIELDS["sessions"],
    )


def cohort_sessions_pager(cohort_id: str, *, page_size: int | None) -> Pager[Session]:
    """The validated plan of a list-cohort-sessions call (spec 4.5)."""
    path = cohort_path(cohort_id, "/sessions")
    check_page_size(page_size)
    params: Params = [] if page_size is None else [("page_size", str(page_size))]
    return Pager(path, [params], "sessions", Session.from_dict, _session_identity)
