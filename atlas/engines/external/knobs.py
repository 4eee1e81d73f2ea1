"""The knobs of an external endpoint: which server and which of its models. Nothing about how it serves is
Atlas's to set, so nothing else is swept; its numerics are whatever was deployed, one per endpoint and model."""

from __future__ import annotations

import re
from typing import ClassVar, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import Field, field_validator

from atlas.engines.knobs_base import EngineKnobs
from atlas.numerics import Numerics

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


def normal_url(url: str) -> str:
    """`url` as Atlas stores it (scheme://host[:port][/prefix], no trailing / or /v1), or ValueError naming
    what is wrong. Credentials and queries are refused: they would be written into every result."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url!r} is no http(s)://host[:port] URL")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise ValueError(f"{parts.scheme}://{parts.hostname}/…: a URL with credentials, a query or a fragment would "
                         "be written into every result; give the API key's environment variable as api_key_env")
    try:
        parts.port  # noqa: B018 - raises on a port out of range
    except ValueError as e:
        raise ValueError(f"{url!r}: {e}") from None
    path = parts.path.rstrip("/")
    path = path.removesuffix("/v1")
    return urlunsplit((parts.scheme, parts.netloc.lower(), path, "", ""))


class ExternalKnobs(EngineKnobs):
    engine: Literal["external"] = "external"
    numerics_fields: ClassVar[tuple[str, ...]] = ("url", "served_model")
    url: str = Field("", description="the endpoint's base URL, http(s)://host[:port][/prefix] (its OpenAI API "
                                     "under /v1); set by `atlas sweep --endpoint`")
    served_model: str | None = Field(None, max_length=512, description=(
        "the model name to request (`--model`); default: the one model its /v1/models lists"))

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not v:
            raise ValueError("an external endpoint needs its url (atlas sweep SPEC --endpoint http://host:port)")
        return normal_url(v)

    @property
    def where(self) -> str:
        """host:port/prefix, as labels show it."""
        return self.url.split("://", 1)[1]

    def numerics(self) -> Numerics:
        # What the endpoint computes with is its owner's: Atlas keys it by endpoint and model (so two endpoints
        # never share a quality result) and never takes it for an unquantized baseline.
        return Numerics(engine="external", dtype=f"{self.where}/{self.served_model or '*'}", weights="as deployed",
                        kv="as deployed", bytes_per_weight=2.0, kv_bytes_per_elem=2.0, unquantized=False, rank=0)

    def label(self) -> str:
        return f"external {self.served_model or '(its model)'} @ {self.where}"

    @property
    def slots(self) -> int:
        """Unknown (the deployment's own); 16 bounds the quality eval's concurrency against it."""
        return 16
