from __future__ import annotations

import types

import failopen.rai as rai
from failopen.exceptions import FailopenError


def test_all_matches_the_public_names() -> None:
    public = {
        name for name, value in vars(rai).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert set(rai.__all__) == public - {"annotations"}
    for name in rai.__all__:
        value = getattr(rai, name)
        if isinstance(value, (int, str)):  # a constant (SCHEMA_VERSION): no module to check
            continue
        assert value.__module__.startswith("failopen.rai"), name


def test_the_contract_names_are_exported() -> None:
    for name in ("Client", "AsyncClient", "Cohort", "Session", "Verify", "Page", "RaiError",
                 "BadRequest", "Unauthorized", "Forbidden", "NotFound", "ServerError",
                 "RaiTransportError", "RaiValidationError"):
        assert name in rai.__all__, name


def test_exception_tree() -> None:
    assert issubclass(rai.RaiError, FailopenError)
    for cls in (rai.BadRequest, rai.Unauthorized, rai.Forbidden, rai.NotFound, rai.ServerError,
                rai.RaiTransportError, rai.InvalidResponse, rai.RaiValidationError):
        assert issubclass(cls, rai.RaiError), cls
    assert issubclass(rai.RaiValidationError, ValueError)
    assert not issubclass(rai.ServerError, ValueError)


def test_error_text_carries_what_a_user_needs() -> None:
    exc = rai.NotFound("no such cohort", status_code=404, code="not_found", request_id="r-9")
    assert str(exc) == "404 not_found: no such cohort (request_id=r-9)"
    assert (exc.status_code, exc.code, exc.message, exc.request_id) == (
        404, "not_found", "no such cohort", "r-9")
    assert str(rai.RaiTransportError("ConnectError: refused")) == "ConnectError: refused"
    assert "request_id='r-9'" in repr(exc)
