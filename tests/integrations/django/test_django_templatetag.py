"""``{% failopen_script %}`` and the staticfiles finder for the snippet."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.template import Context, Template
from django.test import RequestFactory

from failopen.web import SNIPPET_PATH

TEMPLATE = Template("{% load failopen %}{% failopen_script %}")
EXPECTED = (
    '<script src="/static/failopen/failopen.js" defer '
    'data-failopen-flag-url="/failopen/flag" data-failopen-public-key="test-public-key" '
    'data-failopen-token-field="enforcement-token"{nonce}></script>'
)


def render(request: Any = None) -> str:
    return TEMPLATE.render(Context({"request": request} if request is not None else {}))


def test_script_tag_without_nonce(use_failopen: Any) -> None:
    use_failopen()
    assert render(RequestFactory().get("/")) == EXPECTED.format(nonce="")
    assert render() == EXPECTED.format(nonce="")


def test_script_tag_carries_the_requests_csp_nonce(use_failopen: Any) -> None:
    use_failopen()
    request = RequestFactory().get("/")
    request.csp_nonce = "n0nce"
    assert render(request) == EXPECTED.format(nonce=' nonce="n0nce"')


def test_attribute_values_are_escaped(use_failopen: Any) -> None:
    use_failopen(PUBLIC_KEY='"><script>alert(1)</script>', TOKEN_FIELD="a&b")
    request = RequestFactory().get("/")
    request.csp_nonce = '"x'
    html = render(request)
    assert "<script>alert" not in html
    assert 'data-failopen-public-key="&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;"' in html
    assert 'data-failopen-token-field="a&amp;b"' in html
    assert 'nonce="&quot;x"' in html


def test_through_a_view_and_a_template_file(make_client: Any, use_failopen: Any) -> None:
    use_failopen()
    response = make_client().get("/page/")
    assert response.status_code == 200
    assert response.content.decode().strip() == EXPECTED.format(nonce="")


def test_broken_settings_leave_the_tag_out(use_failopen: Any) -> None:
    use_failopen(POLL_INTERVAL="soon")
    assert render() == ""


def test_snippet_finder_looks_where_the_snippet_ships() -> None:
    from failopen.integrations.django.finders import SnippetFinder

    finder = SnippetFinder()
    assert Path(finder.storage.location) / "failopen" / "failopen.js" == SNIPPET_PATH
    assert finder.find("other/file.js") == []
