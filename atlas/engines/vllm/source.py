"""What a vLLM server config is served from: the embedded model (converted once), a path or hub id, a
quantized checkpoint, or a checkpoint with calibrated KV scales. A checkpoint that would make vLLM run other
numerics than the config names is refused here, with the reason."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from atlas.engines.adapter import ModelUnavailable
from atlas.engines.vllm.knobs import VllmKnobs, VllmKV
from atlas.knobs import Dtype

if TYPE_CHECKING:
    from atlas.config import SweepSpec


def scales_checkpoint(spec: SweepSpec, server: VllmKnobs) -> str | None:
    """The checkpoint served for these weights and KV cache when it carries calibrated KV scales
    (model.kv_scales, for kv_cache_dtype fp8_calibrated)."""
    if server.kv_cache_dtype != VllmKV.FP8_CALIBRATED:
        return None
    return (spec.model.kv_scales or {}).get(server.quantization.value)


class VllmModelSource:
    def __init__(self, spec: SweepSpec, note: Callable[[str], None]):
        self.spec, self.note = spec, note
        self._embedded: tuple[str, dict[str, Any]] | None = None

    def resolve(self, server: VllmKnobs) -> tuple[str, dict[str, Any]]:
        from atlas.quantize import CheckpointError, checkpoint_kv_scheme, has_kv_scales, read_provenance

        m = self.spec.model
        q = server.quantization.value
        scales = scales_checkpoint(self.spec, server)
        try:
            if scales:  # this checkpoint stands for the weights too (it is them, with the KV scales added)
                scheme = checkpoint_kv_scheme(scales)  # raises when the checkpoint carries no scales
                return (scales, {"checkpoint": scales, "kv_cache_scheme": scheme,
                                 "quantization": read_provenance(scales)})
            if m.source == "embedded":
                if self._embedded is None:
                    from atlas.engines.embedded import prepare_embedded_model

                    self.note("preparing the embedded model (first run converts the GGUF, ~1 min)")
                    path, prov = prepare_embedded_model()
                    self._embedded = (str(path), prov)
                return self._embedded
            ckpt = m.checkpoints.get(q)
            if not ckpt:
                return (m.path or "", {"revision": m.revision} if m.revision else {})
            if server.kv_cache_dtype == VllmKV.FP8 or server.dtype == Dtype.FLOAT32:
                if has_kv_scales(ckpt):  # vLLM would use them: not the scale-1.0 point, or an FP8 cache for `auto`
                    raise ModelUnavailable(
                        f"model.checkpoints.{q}: {ckpt} carries calibrated KV-cache scales, which vLLM applies: "
                        f"kv_cache_dtype {server.kv_cache_dtype.value} with dtype {server.dtype.value} needs a "
                        "checkpoint without them")
            return (ckpt, {"checkpoint": ckpt, "quantization": read_provenance(ckpt)})
        except CheckpointError as e:
            raise ModelUnavailable(str(e)) from None

    def planned(self, server: VllmKnobs) -> tuple[str, str | None]:
        if self.spec.model.source == "embedded" and not scales_checkpoint(self.spec, server):
            from atlas.engines.embedded import prepared_model_dir, read_marker

            folder = prepared_model_dir()
            return str(folder), None if read_marker(folder) else "the embedded GGUF converted to this folder (~1 min)"
        return self.resolve(server)[0], None  # names, and a checkpoint's config.json read: nothing is made
