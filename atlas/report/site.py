"""Assembles the static report site: index, per-GPU and per-config pages, plotly.js shipped once."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
from jinja2 import Environment, PackageLoader, select_autoescape
from plotly.offline import get_plotlyjs

from atlas import __version__
from atlas.capacity import CapacityResult
from atlas.frontier import DEFAULT_OBJECTIVES, Constraint, Objective, compute_frontier
from atlas.report.figures import interactivity, latency_vs_rate, pair_scatter, scatter3d, speedup_bars
from atlas.results import RunResult
from atlas.slo import SloSpec
from atlas.table import KNOB_COLUMNS, METRICS, capacity_frame, metric_label, results_frame

METRIC_COLUMNS = ["workload", "usd_per_m_output", "output_tok_s", "ttft_p50_ms", "tpot_p50_ms", "e2e_p50_ms",
                  "e2e_p99_ms", "prefix_hit_rate", "accuracy", "perplexity", "agreement", "on_frontier", "source", "extrapolated", "reason"]


CAPACITY_TABLE = ["capacity_rps", "upper_rps", "measurements", "goodput_rps", "usd_per_m_output", "usd_per_m_total",
                  "replicas", "usd_per_hour_total", "ttft_p99_ms", "tpot_p50_ms", "e2e_p90_ms", "accuracy",
                  "perplexity", "agreement", "j_per_output_token", "on_frontier", "source", "reason"]


def _knobs(fr: pd.DataFrame) -> list[str]:
    return [k for k in KNOB_COLUMNS if k in fr and fr[k].notna().any()] if len(fr) else []


def table_columns(fr: pd.DataFrame, per_load_frontier: bool = True) -> list[str]:
    """The table's columns: the knobs of the engines in these results (from their knob models), then metrics."""
    metrics = [c for c in METRIC_COLUMNS if per_load_frontier or c != "on_frontier"]
    return ["status", "gpu", "engine", *_knobs(fr), "load", *metrics]


def safe_json(obj: object) -> str:
    """JSON that cannot end a <script> element or open a comment, whatever strings it holds."""
    text = obj if isinstance(obj, str) else json.dumps(obj, default=str)
    return (text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _env() -> Environment:
    env = Environment(loader=PackageLoader("atlas", "report/templates"), autoescape=select_autoescape(["html"]))
    env.filters["fmt"] = fmt
    env.filters["mlabel"] = metric_label
    return env


def fmt(v: object, digits: int = 4) -> str:
    """A table cell: '—' for a missing value, 4 significant digits for a number, yes/no for a flag."""
    if v is None or (isinstance(v, float) and pd.isna(v)):
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.{digits}g}"
    return str(v)


def speedups(fr: pd.DataFrame) -> pd.DataFrame:
    """Throughput of each numerics over its engine's baseline numerics (the quality baseline: the most precise
    unquantized one) at the same GPU, scheduling knobs and load."""
    ok = fr[fr["status"].isin(["ok", "quality_failed", "invalid"]) & fr["output_tok_s"].notna()]
    sched = ["gpu", "engine", "scheduling", "load"]
    rows = []
    for (gpu, _engine), sub in ok.groupby(["gpu", "engine"]):
        ref = sub[sub["baseline_candidate"]]
        if ref.empty:
            continue
        base_numerics = ref.sort_values("numerics_rank", ascending=False, kind="stable")["numerics"].iloc[0]
        base = ref[ref["numerics"] == base_numerics].set_index(sched, drop=False)
        for _, r in sub.iterrows():
            if r["numerics"] == base_numerics:
                continue
            k = tuple(r[c] for c in sched)
            if k not in base.index:
                continue
            b = base.loc[[k]].iloc[0]
            changed = sum(a != c for a, c in zip(r["numerics"].split(" · "), base_numerics.split(" · "), strict=False))
            rows.append({"gpu": gpu, "numerics": r["numerics"], "kind": "combined" if changed > 1 else "single",
                         "load": r["load"], "level": r["concurrency"] if pd.notna(r["concurrency"]) else r["rate_rps"],
                         "max_num_seqs": r["slots"], "speedup": r["output_tok_s"] / b["output_tok_s"],
                         "tpot_ratio": (r["tpot_p50_ms"] / b["tpot_p50_ms"]) if b["tpot_p50_ms"] else None,
                         "status": r["status"], "baseline": base_numerics})
    return pd.DataFrame(rows)


def prefix_effect(fr: pd.DataFrame) -> pd.DataFrame:
    """Prefix caching's effect: each pair of measured points that differ only in prefix caching (same GPU,
    engine, other knobs, load and workload), TTFT and throughput without and with it, and the hit rate."""
    ok = fr[(fr["source"] == "measured") & fr["status"].isin(["ok", "invalid", "quality_failed"])]
    if ok.empty or "enable_prefix_caching" not in ok or ok["prefix_caching"].nunique() < 2:
        return pd.DataFrame()
    knobs = [k for k in KNOB_COLUMNS if k != "enable_prefix_caching" and k in ok]
    keys = ["gpu", "engine", "load", "workload", *knobs]
    rows = []
    for _, sub in ok.fillna({k: "" for k in knobs}).groupby(keys, dropna=False):
        on, off = sub[sub["prefix_caching"]], sub[~sub["prefix_caching"].astype(bool)]
        if on.empty or off.empty:
            continue
        a, b = off.iloc[0], on.iloc[0]
        rows.append({"gpu": a["gpu"], "config": a["server"], "load": a["load"], "workload": a["workload"],
                     "ttft_off": a["ttft_p50_ms"], "ttft_on": b["ttft_p50_ms"],
                     "ttft_ratio": b["ttft_p50_ms"] / a["ttft_p50_ms"] if a["ttft_p50_ms"] else None,
                     "tok_s_off": a["output_tok_s"], "tok_s_on": b["output_tok_s"], "hit_rate": b["prefix_hit_rate"],
                     "structural": b["structural_reuse"], "status": b["status"], "run_on": b["run_id"],
                     "run_off": a["run_id"]})
    return pd.DataFrame(rows)


def best_under_slo(fr: pd.DataFrame, objectives: list[Objective]) -> list[dict]:  # type: ignore[type-arg]
    out = []
    cost = objectives[0]
    for gpu, sub in fr[fr["eligible"]].groupby("gpu"):
        sub = sub.sort_values(cost.metric, ascending=cost.sense == "min")
        best = sub.iloc[0]
        out.append({"gpu": gpu, "label": best["label"], "run_id": best["run_id"],
                    "values": {o.metric: best[o.metric] for o in objectives}, "n": len(sub)})
    return out


def best_at_capacity(fc: pd.DataFrame, objectives: list[Objective], traffic_rps: float | None) -> list[dict]:  # type: ignore[type-arg]
    """Per GPU, the eligible configuration (SLO met at capacity, quality gate passed) that serves the traffic
    for the fewest dollars an hour, or without a traffic figure the cheapest per token at capacity."""
    out = []
    cost = objectives[0]
    keys = (["usd_per_hour_total", cost.metric] if traffic_rps else [cost.metric])
    for gpu, sub in fc[fc["eligible"]].groupby("gpu"):
        best = sub.sort_values(keys, ascending=[True] * (len(keys) - 1) + [cost.sense == "min"]).iloc[0]
        out.append({"gpu": gpu, "label": best["label"], "run_id": best["run_id"], "capacity_rps": best["capacity_rps"],
                    "replicas": best.get("replicas"), "usd_per_hour_total": best.get("usd_per_hour_total"),
                    "values": {o.metric: best[o.metric] for o in objectives}, "n": len(sub)})
    return out


def _fig(fig: go.Figure) -> str:
    return safe_json(fig.to_json())


def write_assets(folder: Path) -> None:
    """plotly.js, the report's script and its stylesheet, into `folder` (plotly.js once: it is 4.6 MB)."""
    folder.mkdir(parents=True, exist_ok=True)
    plotly_js = folder / "plotly.min.js"
    if not plotly_js.exists() or plotly_js.stat().st_size < 1000:
        plotly_js.write_text(get_plotlyjs())
    static = Path(__file__).parent / "templates"
    (folder / "atlas.js").write_text((static / "atlas.js").read_text())
    (folder / "style.css").write_text((static / "style.css").read_text())


def build_site(results: list[RunResult], out_dir: Path | str, *, title: str,
               objectives: list[Objective] | None = None, constraints: list[Constraint] | None = None,
               load_errors: list[str] | None = None, capacities: list[CapacityResult] | None = None,
               slo: SloSpec | None = None, traffic_rps: float | None = None, per_load: bool = False,
               assets: str = "assets/", home: str | None = None) -> Path:
    """The report site. With capacity records (and not `per_load`) its frontiers compare configurations at their
    capacity under the SLO; every measured load point stays in the table below. `assets`: where the pages find
    plotly.js, the script and the stylesheet, relative to `out_dir` (another folder than the default is the
    caller's to fill: `write_assets`); `home`: a page above this site (relative), linked from every page."""
    objectives = objectives or DEFAULT_OBJECTIVES
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "configs").mkdir(exist_ok=True)
    if assets == "assets/":
        write_assets(out / "assets")

    fr = compute_frontier(results_frame(results), objectives, constraints) if results else pd.DataFrame()
    cap_view = bool(capacities) and not per_load
    fc = (compute_frontier(capacity_frame(capacities or [], results, traffic_rps), objectives, constraints)
          if cap_view else pd.DataFrame())
    env = _env()
    by_id = {r.run_id: r for r in results}
    others = [p for p in (r.provenance for r in results) if p and p.engine.get("started_by_atlas") is False]
    endpoints = sorted({f"{p.engine.get('url')} serving {p.engine.get('served_model')} "
                        f"({p.engine_version or 'version unreported'})"
                        for p in others if p.engine.get("engine") != "imported"})
    imported = sorted({f"{p.engine.get('file')} from {p.engine.get('tool')} {p.engine.get('tool_version')} "
                       f"(sha256 {str(p.engine.get('file_sha256'))[:12]}), model {p.engine.get('served_model')}"
                       for p in others if p.engine.get("engine") == "imported"})
    gpus = sorted(set(fr["gpu"].unique()) | (set(fc["gpu"].unique()) if len(fc) else set())) if len(fr) else []
    common = {"title": title, "version": __version__, "objectives": objectives, "constraints": constraints or [],
              "columns": table_columns(fr, not cap_view), "gpus": gpus, "slo": slo, "traffic_rps": traffic_rps,
              "cap_columns": ["status", "gpu", "engine", *CAPACITY_TABLE] if cap_view else [], "endpoints": endpoints,
              "imported": imported, "assets": assets, "home": home}

    def page(df: pd.DataFrame, name: str, heading: str, prefix: str = "", caps: pd.DataFrame | None = None) -> None:
        figs = []
        front = caps if caps is not None else df
        if len(front):
            pairs = [(objectives[i], objectives[j]) for i in range(len(objectives))
                     for j in range(i + 1, len(objectives))]
            figs = [_fig(pair_scatter(front, a, b)) for a, b in pairs]
            if len(objectives) >= 3:
                figs.append(_fig(scatter3d(front, objectives)))
        if caps is not None and len(df):
            figs += [_fig(latency_vs_rate(df, caps, metric, limit)) for metric, limit in
                     (slo.targets().items() if slo else []) if metric in df]
            figs.append(_fig(interactivity(df, caps)))
        sp = speedups(df) if len(df) else pd.DataFrame()
        sp_ok = sp[sp["status"] == "ok"] if len(sp) else sp
        if len(sp_ok):
            figs.append(_fig(speedup_bars(sp_ok)))
        counts = df["status"].value_counts().to_dict() if len(df) else {}
        rows = df.sort_values(["on_frontier", "status"], ascending=[False, True]).to_dict("records") if len(df) else []
        if caps is not None:
            cap_rows = caps.assign(_ok=caps["status"] != "ok").sort_values(
                ["on_frontier", "_ok", "capacity_rps"], ascending=[False, True, False])
            best = best_at_capacity(caps, objectives, traffic_rps) if len(caps) else []
            n_front = int(caps["on_frontier"].sum()) if len(caps) else 0
        else:
            cap_rows = pd.DataFrame()
            best = best_under_slo(df, objectives) if len(df) else []
            n_front = int(df["on_frontier"].sum()) if len(df) else 0
        html = env.get_template("index.html").render(
            **common, heading=heading, prefix=prefix, figures=figs, rows=rows, counts=counts, best=best,
            speedups=sp.to_dict("records"), prefix_rows=prefix_effect(df).to_dict("records") if len(df) else [],
            load_errors=load_errors or [], n_frontier=n_front,
            capacity=cap_view, cap_rows=cap_rows.to_dict("records") if len(cap_rows) else [])
        (out / name).write_text(html)

    page(fr, "index.html", title, caps=fc if cap_view else None)
    for g in gpus:
        page(fr[fr["gpu"] == g], f"gpu-{g}.html", f"{title} — {g}", caps=fc[fc["gpu"] == g] if cap_view else None)
    if cap_view:
        (out / "servers").mkdir(exist_ok=True)
        ctpl = env.get_template("capacity.html")
        for c in capacities or []:
            pts = fr[fr["server"] == c.config.server.label()] if len(fr) else fr
            pts = pts[pts["gpu"] == c.gpu] if len(pts) else pts
            mine = fc[fc["server_key"] == c.server_key]
            cfigs = [_fig(latency_vs_rate(pts, mine, metric, limit)) for metric, limit in c.slo.targets().items()
                     if len(pts) and metric in pts]
            if len(pts):
                cfigs.append(_fig(interactivity(pts, mine)))
            (out / "servers" / f"{c.server_key}.html").write_text(ctpl.render(
                **common, prefix="../", c=c, row=mine.iloc[0].to_dict() if len(mine) else {}, figures=cfigs,
                known=by_id))
    tpl = env.get_template("config.html")
    for rec in fr.to_dict("records") if len(fr) else []:
        r = by_id[rec["run_id"]]
        (out / "configs" / f"{r.run_id}.html").write_text(tpl.render(
            **common, prefix="../", r=r, row=rec, metrics=METRICS,
            result_json=r.model_dump_json(indent=1, exclude={"quality": {"items"}})))
    return out / "index.html"
