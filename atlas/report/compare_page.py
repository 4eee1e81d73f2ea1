"""The offline page of a comparison (atlas compare): one HTML file and the site's stylesheet, no script."""

from __future__ import annotations

import shutil
from importlib.resources import files
from pathlib import Path

from atlas import __version__
from atlas.compare import Comparison
from atlas.report.site import _env


def write_compare_page(c: Comparison, out: Path, gate: list[str] | None = None,
                       rules: list[str] | None = None, *, css: str | None = None, home: str | None = None,
                       names: tuple[str, str] | None = None) -> Path:
    """Writes `out`/index.html and `out`/assets/style.css (written to a temporary name, then moved). In a
    published site `css` is the site's stylesheet and `home` its index (both relative to `out`), and `names`
    the two atlases' names (instead of their folders')."""
    out.mkdir(parents=True, exist_ok=True)
    if css is None:
        (out / "assets").mkdir(exist_ok=True)
        shutil.copyfile(str(files("atlas") / "report" / "templates" / "style.css"), out / "assets" / "style.css")
    a, b = names or (Path(c.baseline).name, Path(c.new).name)
    html = _env().get_template("compare.html").render(c=c, title=f"{a} → {b}", version=__version__, gate=gate,
                                                      rules=rules or [], css=css or "assets/style.css", home=home,
                                                      names=names)
    tmp = out / ".index.html.tmp"
    tmp.write_text(html, encoding="utf-8")
    tmp.replace(out / "index.html")
    return out / "index.html"
