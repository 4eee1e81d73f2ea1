"""Pure plotly figure builders over a frontier-annotated results frame."""

from __future__ import annotations

import html

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from atlas.frontier import Objective, non_dominated
from atlas.table import metric_label

_COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2", "#bcbd22"]


def _hover(df: pd.DataFrame) -> list[str]:
    out = []
    for _, r in df.iterrows():
        text = f"{html.escape(str(r['label']))}<br>gpu {html.escape(str(r['gpu']))} · {html.escape(str(r['source']))}"
        if isinstance(r.get("excluded_reason"), str):
            text += f"<br>excluded: {html.escape(r['excluded_reason'][:160])}"
        out.append(text)
    return out


def _group_key(df: pd.DataFrame) -> pd.Series:
    return df["engine"] + " · " + df["numerics"]


def pair_scatter(df: pd.DataFrame, x: Objective, y: Objective, title: str | None = None) -> go.Figure:
    """Eligible points coloured by numerics, the 2-D frontier of this projection drawn as a step line,
    excluded points that still have both metrics shown as grey crosses with their reason."""
    fig = go.Figure()
    have = df[df[x.metric].notna() & df[y.metric].notna()] if len(df) else df
    eligible = have[have["eligible"]] if len(have) else have
    groups = _group_key(eligible) if len(eligible) else pd.Series(dtype=str)
    for i, g in enumerate(sorted(set(groups))):
        sub = eligible[groups == g]
        fig.add_trace(go.Scatter(x=sub[x.metric], y=sub[y.metric], mode="markers", name=html.escape(g),
                                 marker={"size": 10, "color": _COLORS[i % len(_COLORS)],
                                         "symbol": np.where(sub["source"] == "simulated", "diamond-open",
                                                            "circle").tolist()},
                                 hovertext=_hover(sub), hoverinfo="text"))
    if len(eligible):
        pts = np.column_stack([eligible[x.metric].to_numpy(float) * (1 if x.sense == "min" else -1),
                               eligible[y.metric].to_numpy(float) * (1 if y.sense == "min" else -1)])
        front = eligible[non_dominated(pts)].sort_values(x.metric)
        fig.add_trace(go.Scatter(x=front[x.metric], y=front[y.metric], mode="lines", name="Pareto frontier",
                                 line={"shape": "hv" if x.sense == "min" else "vh",
                                       "color": "#222", "dash": "dot"}, hoverinfo="skip"))
    excluded = have[~have["eligible"]] if len(have) else have
    if len(excluded):
        fig.add_trace(go.Scatter(x=excluded[x.metric], y=excluded[y.metric], mode="markers",
                                 name="excluded (failed / gated / SLO)",
                                 marker={"symbol": "x", "size": 9, "color": "#999"},
                                 hovertext=_hover(excluded), hoverinfo="text"))
    fig.update_layout(title=title or f"{metric_label(y.metric)} vs {metric_label(x.metric)}",
                      xaxis_title=f"{metric_label(x.metric)} ({'lower' if x.sense == 'min' else 'higher'} is better)",
                      yaxis_title=f"{metric_label(y.metric)} ({'lower' if y.sense == 'min' else 'higher'} is better)",
                      template="plotly_white", height=440, margin={"l": 60, "r": 20, "t": 50, "b": 50},
                      legend={"font": {"size": 10}})
    return fig


def scatter3d(df: pd.DataFrame, objectives: list[Objective]) -> go.Figure:
    a, b, c = objectives[:3]
    have = df[df["eligible"] & df[a.metric].notna() & df[b.metric].notna() & df[c.metric].notna()]
    color = np.where(have["on_frontier"], "#d62728", "#1f77b4").tolist() if len(have) else []
    fig = go.Figure(go.Scatter3d(x=have[a.metric], y=have[b.metric], z=have[c.metric], mode="markers",
                                 marker={"size": 5, "color": color}, hovertext=_hover(have), hoverinfo="text",
                                 name="eligible (red: on the frontier)"))
    fig.update_layout(title="Cost x latency x quality (red: Pareto-optimal)", template="plotly_white", height=560,
                      scene={"xaxis_title": metric_label(a.metric), "yaxis_title": metric_label(b.metric),
                             "zaxis_title": metric_label(c.metric)}, margin={"l": 0, "r": 0, "t": 40, "b": 0})
    return fig


def speedup_bars(speedups: pd.DataFrame) -> go.Figure:
    fig = go.Figure()
    for i, (cfg, sub) in enumerate(speedups.groupby("numerics", sort=False)):
        sub = sub.sort_values(["max_num_seqs", "level"])
        x = [f"seqs {m} · {ld}" for m, ld in zip(sub["max_num_seqs"], sub["load"], strict=True)]
        fig.add_trace(go.Bar(x=x, y=sub["speedup"], name=html.escape(str(cfg)),
                             marker_color=_COLORS[i % len(_COLORS)]))
    fig.add_hline(y=1.0, line_dash="dot", line_color="#444")
    fig.update_layout(barmode="group", title="Output-throughput speed-up vs the baseline numerics, per batching and load level",
                      yaxis_title="speed-up (x)", template="plotly_white", height=400)
    return fig


def _capacity_star(fig: go.Figure, at: pd.DataFrame, xs: pd.Series, ys: pd.Series) -> None:
    """Each config's capacity (rows of `at`) as a star at (xs, ys)."""
    texts = [f"{html.escape(str(lb))}: {c:g} rps" for lb, c in zip(at["label"], at["capacity_rps"], strict=True)]
    fig.add_trace(go.Scatter(x=xs.tolist(), y=ys.tolist(), mode="markers", name="capacity under the SLO",
                             marker={"symbol": "star", "size": 16, "color": "#d62728", "line": {"width": 1}},
                             hovertext=texts, hoverinfo="text"))


def latency_vs_rate(points: pd.DataFrame, caps: pd.DataFrame, metric: str, limit: float) -> go.Figure:
    """Each config's open-loop rates: the offered arrival rate (what capacity is defined on; a short Poisson
    window realizes a rate that differs from it) against a latency the SLO targets, the SLO as a dashed line and
    each capacity as a star (the highest rate that met the whole SLO with a valid point)."""
    fig = go.Figure()
    rated = points[points["rate_rps"].notna() & points[metric].notna()]
    for i, (label, sub) in enumerate(rated.groupby("server", sort=True)):
        sub = sub.sort_values("rate_rps")
        fig.add_trace(go.Scatter(x=sub["rate_rps"], y=sub[metric], mode="lines+markers", name=html.escape(label),
                                 line={"color": _COLORS[i % len(_COLORS)]},
                                 marker={"symbol": np.where(sub["status"] == "ok", "circle", "x").tolist()},
                                 hovertext=[f"measured {r:.3g} req/s · {html.escape(str(s))}"
                                            for r, s in zip(sub["requests_s"], sub["status"], strict=True)],
                                 hoverinfo="text+x+y"))
    at = caps[caps["capacity_rps"].notna() & caps[metric].notna()] if len(caps) else caps
    if len(at):
        _capacity_star(fig, at, at["capacity_rps"], at[metric])
    fig.add_hline(y=limit, line_dash="dash", line_color="#d62728", annotation_text=f"SLO {limit:g} ms")
    fig.update_layout(title=f"{metric_label(metric)} vs offered arrival rate (open loop)",
                      xaxis_title="offered arrival rate (req/s)", yaxis_title=metric_label(metric),
                      template="plotly_white", height=440, legend={"font": {"size": 10}})
    return fig


def interactivity(points: pd.DataFrame, caps: pd.DataFrame) -> go.Figure:
    """Tokens/s each user sees (1000 / p50 TPOT) against tokens/s the GPU serves, every measured load of each
    config: the interactivity trade-off; stars where each config's capacity under the SLO lies."""
    fig = go.Figure()
    have = points[points["tpot_p50_ms"].notna() & points["output_tok_s"].notna()]
    for i, (label, sub) in enumerate(have.groupby("server", sort=True)):
        sub = sub.sort_values("output_tok_s")
        fig.add_trace(go.Scatter(x=sub["output_tok_s"], y=1000.0 / sub["tpot_p50_ms"], mode="lines+markers",
                                 name=html.escape(label), line={"color": _COLORS[i % len(_COLORS)]},
                                 hovertext=[html.escape(str(x)) for x in sub["load"]], hoverinfo="text+x+y"))
    at = caps[caps["capacity_rps"].notna() & caps["tpot_p50_ms"].notna()] if len(caps) else caps
    if len(at):
        _capacity_star(fig, at, at["output_tok_s"], 1000.0 / at["tpot_p50_ms"])
    fig.update_layout(title="Interactivity: tokens/s per user vs tokens/s per GPU", template="plotly_white",
                      xaxis_title="output tokens/s per GPU", yaxis_title="tokens/s per user (1000 / p50 TPOT)",
                      height=440, legend={"font": {"size": 10}})
    return fig
