"""The offline page of a comparison (atlas compare): one HTML file and the site's stylesheet, no script."""

from __future__ import annotations

import shutil
from importlib.resources import files
from pathlib import Path

from atlas import __version__
from atlas.compare import Comparison
from atlas.report.site import _env


def write_compare_page(c: Comparison, out: Path, gate: list[str] | None = None,
                       rules: list[str] | None = None) -> Path:
    """Writes `out`/index.html and `out`/assets/style.css (written to a temporary name, then moved)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "assets").mkdir(exist_ok=True)
    css = files("atlas") / "report" / "templates" / "style.css"
    shutil.copyfile(str(css), out / "assets" / "style.css")
    title = f"{Path(c.baseline).name} → {Path(c.new).name}"
    html = _env().get_template("compare.html").render(c=c, title=title, version=__version__, gate=gate,
                                                      rules=rules or [])
    tmp = out / ".index.html.tmp"
    tmp.write_text(html, encoding="utf-8")
    tmp.replace(out / "index.html")
    return out / "index.html"
