"""What a llama.cpp server config is served from: the GGUF of its weight type, a given file
(model.checkpoints.<type>) or a variant made from the source GGUF (cached, sha256 in provenance)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from atlas.engines.adapter import ModelUnavailable
from atlas.engines.embedded import sha256_file
from atlas.engines.llamacpp.gguf import GgufError, source_gguf, variant, variants_dir
from atlas.engines.llamacpp.knobs import LlamaCppKnobs

if TYPE_CHECKING:
    from atlas.config import SweepSpec


class GgufSource:
    def __init__(self, spec: SweepSpec, note: Callable[[str], None]):
        self.spec, self.note = spec, note
        self._source: tuple[Path, dict[str, Any], str] | None = None

    def resolve(self, server: LlamaCppKnobs) -> tuple[str, dict[str, Any]]:
        q = server.quantization
        given = self.spec.model.checkpoints.get(q.value)
        try:
            if given:
                path = Path(given).expanduser()
                if not path.is_file():
                    raise GgufError(f"model.checkpoints.{q.value}: {given}: no such GGUF file")
                return str(path), {"checkpoint": str(path), "sha256": sha256_file(path)}
            if self._source is None:
                src, src_prov = source_gguf(self.spec.model)
                self._source = (src, src_prov, sha256_file(src))
            src, src_prov, src_sha = self._source
            path, prov = variant(src, q, src_sha, on_make=lambda t: self.note(f"GGUF {t.value}: making it (once, then cached)"))
        except GgufError as e:
            raise ModelUnavailable(str(e)) from None
        return str(path), {**src_prov, "source_sha256": src_sha, "variant": prov}

    def planned(self, server: LlamaCppKnobs) -> tuple[str, str | None]:
        q = server.quantization
        given = self.spec.model.checkpoints.get(q.value)
        try:
            if given:
                if not Path(given).expanduser().is_file():
                    raise GgufError(f"model.checkpoints.{q.value}: {given}: no such GGUF file")
                return str(Path(given).expanduser()), None
            if self._source is None:
                src, src_prov = source_gguf(self.spec.model)
                self._source = (src, src_prov, sha256_file(src))
            src, _, src_sha = self._source
        except GgufError as e:
            raise ModelUnavailable(str(e)) from None
        dest = variants_dir(src, src_sha) / f"{q.value}.gguf"
        return str(dest), None if dest.is_file() else f"GGUF {q.value} made from {src.name} (once, then cached)"
