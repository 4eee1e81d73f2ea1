"""`atlas sweep SPEC --endpoint URL [--model NAME]`: the spec's load, workloads, SLO capacity and quality against
a server someone else deployed. Its server knobs are its owner's, so the spec's grids give way to one external
grid, and the results get a folder of their own (an endpoint's points never mix with the spec's own sweep)."""

from __future__ import annotations

import re

from atlas.config import SpecError, SweepSpec, parse_spec
from atlas.engines.external.knobs import normal_url


def endpoint_name(spec_name: str, url: str) -> str:
    """The sweep name of an endpoint's run: the spec's, then the endpoint's host, port and prefix."""
    where = url.split("://", 1)[1]
    return f"{spec_name}-ext-{re.sub(r'[^A-Za-z0-9_.-]+', '-', where).strip('-')}"[:120]


def served_model(url: str, model: str | None, spec: SweepSpec) -> str:
    """The model the sweep will request, checked on the endpoint now (it answers, takes the key, serves the
    model, long enough for the spec), so it is pinned in every run id: a different model behind the same URL
    is a different configuration."""
    from atlas.engines.base import EngineError
    from atlas.engines.external.engine import ExternalEngine

    probe = ExternalEngine(url, model, api_key_env=spec.api_key_env, max_model_len=spec.model.max_model_len)
    try:
        probe.start()
    except EngineError as e:
        raise SpecError(f"--endpoint: {e.reason}") from None
    return probe.served_model


def with_endpoint(spec: SweepSpec, url: str, model: str | None) -> tuple[SweepSpec, list[str]]:
    """The spec measured against `url` (serving `model`, or its only model), and notes on what changed."""
    try:
        url = normal_url(url)
    except ValueError as e:
        raise SpecError(f"--endpoint: {e}") from None
    if model is not None and not model.strip():
        raise SpecError("--model: empty model name")
    notes = []
    others = [e for e in spec.engines() if e != "external"]
    if others:
        notes.append(f"the spec's {', '.join(others)} grid(s) are not swept: an endpoint's server knobs are its "
                     "owner's, so each load point is measured once against it")
    model = served_model(url, model.strip() if model else None, spec)
    name = endpoint_name(spec.name, url)
    data = spec.model_dump(mode="json")
    data.update(name=name, engine="external",
                grid={"engine": "external", "url": [url], "served_model": [model]})
    out = parse_spec(data, "--endpoint")
    notes.append(f"measuring {model} at {url} (external endpoint, not started by Atlas); results go to "
                 f"<results>/{name}/")
    return out, notes
