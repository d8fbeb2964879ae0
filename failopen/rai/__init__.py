"""Client of the vendor's session-intelligence API (spec interface A): cohorts and sessions of
retrospectively detected bot attacks, for SIEM, SOAR and data-lake ingestion.

    from failopen.rai import Client

    with Client("https://api.vendor.example", client_id, client_secret) as rai:
        for session in rai.iter_sessions("2024-05-01T00:00:00Z", "2024-06-01T00:00:00Z", ["pk"]):
            ...

:class:`AsyncClient` is the asyncio twin with the same methods. The record schemas that
``failopen rai sync`` writes ship with the package: :func:`json_schema` (JSON Schema, version
:data:`SCHEMA_VERSION`) and :func:`arrow_schema` (its Parquet files; needs pyarrow).
"""

from __future__ import annotations

from failopen.rai._async_client import AsyncClient
from failopen.rai._client import Client
from failopen.rai._parquet import arrow_schema
from failopen.rai._schema import SCHEMA_VERSION, json_schema, unknown_fields
from failopen.rai.auth import ClientCredentialsAuth
from failopen.rai.exceptions import (
    BadRequest,
    Forbidden,
    InvalidResponse,
    NotFound,
    RaiError,
    RaiTransportError,
    RaiValidationError,
    ServerError,
    Unauthorized,
)
from failopen.rai.models import Cohort, Page, Session, Verify

__all__ = [
    "Client",
    "AsyncClient",
    "ClientCredentialsAuth",
    "Cohort",
    "Session",
    "Verify",
    "Page",
    "RaiError",
    "RaiValidationError",
    "RaiTransportError",
    "InvalidResponse",
    "BadRequest",
    "Unauthorized",
    "Forbidden",
    "NotFound",
    "ServerError",
    "SCHEMA_VERSION",
    "json_schema",
    "arrow_schema",
    "unknown_fields",
]
