"""`atlas publish RESULTS... --out site/`: one static site over many sweeps (GPUs, models, engines, dates): an
index of every atlas with its model, GPU, engine, date, frontier size and best configuration under its SLO, each
atlas's report below it, the compare pages of sweeps that measured the same thing, plotly.js once for the
whole site and relative links only, so the folder can be served by any static host or opened from disk. The
site is built in a temporary folder beside `out` and moved into place: a failure leaves no half-written site."""

from __future__ import annotations

import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from atlas import __version__
from atlas.compare import CompareError, compare
from atlas.frontier import compute_frontier
from atlas.report.compare_page import write_compare_page
from atlas.report.inputs import SweepInputs, sweep_inputs
from atlas.report.site import _env, best_at_capacity, best_under_slo, build_site, write_assets
from atlas.results import ResultError
from atlas.table import capacity_frame, results_frame


class PublishError(ValueError):
    """A site that cannot be published; one line naming the folder or atlas."""


@dataclass
class Atlas:
    slug: str  # its folder in the site
    name: str
    folder: Path  # its results folder (results/<sweep>)
    models: list[str]
    gpus: list[str]
    engines: list[str]
    date: str | None  # when its last point finished
    points: int
    ok: int
    frontier: int
    at_capacity: bool
    slo: str | None
    best: list[dict] = field(default_factory=list)  # type: ignore[type-arg]
    external: bool = False
    source: str = ""  # the results folder as it was given
    run_ids: frozenset[str] = field(default_factory=frozenset, repr=False)

    @property
    def what(self) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
        """What it measured (models, GPUs, engines): atlases alike in this are compared."""
        return tuple(self.models), tuple(self.gpus), tuple(self.engines)


@dataclass
class Published:
    index: Path
    atlases: list[Atlas]
    compares: list[tuple[str, str, str]]  # (baseline slug, new slug, page href)
    notes: list[str]  # one line each: unreadable files, pairs not compared


def _slug(name: str, taken: set[str]) -> str:
    base = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.") or "atlas"
    slug, n = base, 2
    while slug in taken or slug in ("assets", "compare"):
        slug, n = f"{base}-{n}", n + 1
    taken.add(slug)
    return slug


def _folder(root: Path, name: str) -> Path:
    return root / name if (root / name).is_dir() else root


def collect(roots: list[Path]) -> tuple[list[tuple[Path, SweepInputs]], list[str]]:
    """Every sweep under the given results folders (a folder of sweeps or one sweep's), with its folder."""
    out: list[tuple[Path, SweepInputs]] = []
    notes: list[str] = []
    for root in roots:
        if not root.is_dir():
            raise PublishError(f"{root}: no such results folder")
        try:
            sweeps, errors = sweep_inputs(root)
        except ResultError as e:
            raise PublishError(str(e)) from None
        notes += errors
        out += [(_folder(root, sw.name), sw) for sw in sweeps]
    return out, notes


def summarize(slug: str, folder: Path, sw: SweepInputs) -> Atlas:
    """One atlas's line of the index: what it measured, when, its frontier size and best configuration."""
    rs = sw.results
    at_capacity = bool(sw.capacities)
    frame = capacity_frame(sw.capacities, rs, sw.traffic_rps) if at_capacity else results_frame(rs)
    fr = compute_frontier(frame, sw.objectives, []) if len(frame) else frame
    best = (best_at_capacity(fr, sw.objectives, sw.traffic_rps) if at_capacity else best_under_slo(fr, sw.objectives)
            ) if len(fr) else []
    for b in best:
        b["href"] = f"{slug}/configs/{b['run_id']}.html"
    finished = [r.provenance.finished_at for r in rs if r.provenance is not None and r.provenance.finished_at]
    return Atlas(slug=slug, name=sw.name, folder=folder, models=sorted({r.config.model.id for r in rs}),
                 gpus=sorted({r.config.gpu for r in rs}), engines=sorted({r.config.engine for r in rs}),
                 date=max(finished)[:10] if finished else None, points=len(rs),
                 ok=sum(r.status == "ok" for r in rs), frontier=int(fr["on_frontier"].sum()) if len(fr) else 0,
                 at_capacity=at_capacity, slo=sw.slo.describe() if sw.slo is not None else None, best=best,
                 external=any(r.config.engine == "external" for r in rs),
                 run_ids=frozenset(r.run_id for r in rs), source=str(folder))


def pairs(atlases: list[Atlas], asked: list[tuple[str, str]]) -> list[tuple[Atlas, Atlas, bool]]:
    """The comparisons to publish: those asked for (by name or slug), then each atlas against the latest one
    before it (by date) that measured some of the same configurations of the same models on the same GPUs with
    the same engines. (baseline, new, asked)."""
    by = {a.slug: a for a in atlases} | {a.name: a for a in atlases}
    out: list[tuple[Atlas, Atlas, bool]] = []
    for old, new in asked:
        for n in (old, new):
            if n not in by:
                raise PublishError(f"--compare {old}:{new}: no atlas named {n!r} (have {', '.join(sorted(by))[:300]})")
        out.append((by[old], by[new], True))
    groups: dict[tuple[tuple[str, ...], ...], list[Atlas]] = {}
    for a in atlases:
        groups.setdefault(a.what, []).append(a)
    for group in groups.values():
        ordered = sorted(group, key=lambda a: (a.date or "", a.slug))
        for k, after in enumerate(ordered):
            before = next((b for b in reversed(ordered[:k]) if b.run_ids & after.run_ids), None)
            if before is not None and not any(o is before and n is after for o, n, _ in out):
                out.append((before, after, False))
    return out


def publish(roots: list[Path], out: Path, *, asked: list[tuple[str, str]] | None = None,
            title: str = "Atlas") -> Published:
    sweeps, notes = collect(roots)
    if not sweeps:
        raise PublishError(f"{', '.join(map(str, roots))}: no sweeps to publish")
    out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        taken: set[str] = set()
        atlases = []
        write_assets(tmp / "assets")
        for folder, sw in sweeps:
            slug = _slug(sw.name, taken)
            build_site(sw.results, tmp / slug, title=f"Atlas — {sw.name}", objectives=sw.objectives,
                       capacities=sw.capacities, slo=sw.slo, traffic_rps=sw.traffic_rps, assets="../assets/",
                       home="../index.html")
            atlases.append(summarize(slug, folder, sw))
        compares = []
        for old, new, was_asked in pairs(atlases, asked or []):
            try:
                c = compare(old.folder, new.folder)
            except (CompareError, ResultError) as e:
                if was_asked:
                    raise PublishError(f"--compare {old.name}:{new.name}: {e}") from None
                notes.append(f"{old.name} and {new.name} not compared: {e}")
                continue
            href = f"compare/{old.slug}--{new.slug}/index.html"
            write_compare_page(c, tmp / "compare" / f"{old.slug}--{new.slug}", css="../../assets/style.css",
                               home="../../index.html", names=(old.slug, new.slug))
            compares.append((old.slug, new.slug, href))
        index = _env().get_template("publish.html").render(
            title=title, version=__version__, atlases=atlases, compares=compares, notes=notes)
        (tmp / "index.html").write_text(index, encoding="utf-8")
        if out.exists():
            old_site = out.with_name(f".{out.name}.old")
            shutil.rmtree(old_site, ignore_errors=True)
            out.rename(old_site)
            tmp.rename(out)
            shutil.rmtree(old_site, ignore_errors=True)
        else:
            tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Published(out / "index.html", atlases, compares, notes)
