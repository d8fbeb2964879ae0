"""``failopen_script()`` in a Flask app's Jinja templates (issue 31, item 13): the tag Django's
``{% failopen_script %}`` renders, for the WSGI middleware's routes, which answer what it names.
A real Flask app behind the real middleware, over the test kit's fakes in-process.
"""

from __future__ import annotations

import html
import logging
import re
from collections.abc import Iterator
from typing import Any

import pytest
from failopen.integrations.flask import init_app
from failopen.integrations.wsgi import FailOpenMiddleware
from flask import Flask, render_template_string
from werkzeug.middleware.proxy_fix import ProxyFix

from failopen import Config
from failopen.runtime import FailOpen
from failopen.testing import FakeStatusPage, FakeVerifyAPI
from failopen.web import snippet_attributes, snippet_tag

PAGE = "<!doctype html><head>{{ failopen_script(%s) }}</head><form method=post action=/login>"


@pytest.fixture
def site() -> Iterator[tuple[Flask, FailOpen]]:
    """A Flask app with a log-in page, behind FailOpenMiddleware, the helper registered."""
    page, verify = FakeStatusPage(), FakeVerifyAPI()
    runtime = FailOpen(Config(
        status_url="https://status.test", verify_url="https://verify.test" + verify.path,
        private_key=verify.private_key, protected_paths=("/login",), poll_interval=3600.0,
        public_key='pk"<live>&', vendor_url="https://client.vendor.test"),
        status_transport=page.transport(), verify_transport=verify.transport())
    app = Flask("flask_template")

    @app.get("/")
    def home() -> str:
        return render_template_string(PAGE % "")

    @app.get("/tuned")
    def tuned() -> str:
        return render_template_string(PAGE % 'form="#login", retries=5, nonce="n0nce"')

    @app.get("/typo")
    def typo() -> str:
        return render_template_string(PAGE % "retries=-1")

    @app.get("/login")
    def login_page() -> str:
        return render_template_string(PAGE % "only_protected=True")

    @app.get("/about")
    def about() -> str:
        return render_template_string(PAGE % "only_protected=True")

    app.wsgi_app = FailOpenMiddleware(app.wsgi_app, runtime=runtime)  # type: ignore[method-assign]
    init_app(app)
    try:
        yield app, runtime
    finally:
        runtime.stop()


def _tag(page: str) -> str:
    found = re.search(r"<script [^>]*></script>", page)
    assert found is not None, page
    return found.group(0)


def test_the_tag_is_the_one_django_renders_and_its_urls_answer(site: Any) -> None:
    app, runtime = site
    client = app.test_client()
    tag = _tag(client.get("/").get_data(as_text=True))
    # The shared renderer, with the settings: Django's {% failopen_script %} renders the same.
    assert tag == snippet_tag("/failopen/failopen.js", snippet_attributes(
        runtime.config, flag_url="/failopen/flag"))
    assert 'data-failopen-public-key="pk&quot;&lt;live&gt;&amp;"' in tag  # escaped
    src = html.unescape(re.search(r'src="([^"]+)"', tag).group(1))  # type: ignore[union-attr]
    flag = html.unescape(re.search(r'data-failopen-flag-url="([^"]+)"',  # type: ignore[union-attr]
                                   tag).group(1))
    script = client.get(src)
    assert script.status_code == 200 and b"FailOpen" in script.data
    assert client.get(flag).get_json()["enforce"] is True
    assert app.extensions["failopen"] is runtime  # where the WTForms field looks


def test_options_and_the_nonce_are_the_snippets_attributes(site: Any) -> None:
    app, _runtime = site
    tag = _tag(app.test_client().get("/tuned").get_data(as_text=True))
    assert 'data-failopen-form="#login"' in tag and 'data-failopen-retries="5"' in tag
    assert 'nonce="n0nce"' in tag


def test_a_mistyped_option_logs_and_keeps_the_defaults(site: Any,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    app, _runtime = site
    with caplog.at_level(logging.ERROR, logger="failopen.flask"):
        tag = _tag(app.test_client().get("/typo").get_data(as_text=True))
    assert "data-failopen-retries" not in tag and "data-failopen-flag-url" in tag
    assert "retries: expected a whole number of at least 0" in caplog.text


def test_under_a_mount_prefix_the_urls_carry_it(site: Any) -> None:
    app, _runtime = site
    client = app.test_client()
    tag = _tag(client.get("/", base_url="http://localhost/shop").get_data(as_text=True))
    assert 'src="/shop/failopen/failopen.js"' in tag
    assert 'data-failopen-flag-url="/shop/failopen/flag"' in tag
    answer = client.get("/failopen/flag", base_url="http://localhost/shop")
    assert answer.get_json()["enforce"] is True


def test_only_protected_leaves_other_pages_alone(site: Any) -> None:
    app, _runtime = site
    client = app.test_client()
    assert "<script" in client.get("/login").get_data(as_text=True)
    assert "<script" not in client.get("/about").get_data(as_text=True)


def test_init_app_finds_the_middleware_through_a_wrapper_or_says_what_to_do(site: Any) -> None:
    app, runtime = site
    wrapped = Flask("wrapped")
    wrapped.wsgi_app = ProxyFix(app.wsgi_app)  # type: ignore[method-assign]
    init_app(wrapped)
    assert "failopen_script" in wrapped.jinja_env.globals
    bare = Flask("bare")
    with pytest.raises(TypeError, match=r"wrap the app first \(app.wsgi_app = "
                                        r"FailOpenMiddleware\(app.wsgi_app\)\)"):
        init_app(bare)
    assert wrapped.extensions["failopen"] is runtime
