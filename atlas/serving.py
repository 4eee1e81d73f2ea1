"""What a server config is served from, and the engine that serves it: the model (embedded, a path, a quantized
checkpoint, a checkpoint with calibrated KV scales, a GGUF variant) and the engine command line that goes with it.
A checkpoint that would make vLLM run other numerics than the config names is refused here, with the reason."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from atlas.config import ServerKnobs, SweepSpec
from atlas.engines.embedded import prepare_embedded_model, sha256_file
from atlas.engines.gguf import GgufError, source_gguf, variant
from atlas.engines.process import launch_name
from atlas.engines.vllm import VllmEngine
from atlas.hardware import GpuSpec
from atlas.knobs import Dtype, EngineKind, KVCacheDtype
from atlas.plan import RunConfig
from atlas.quantize import CheckpointError, checkpoint_kv_scheme, has_kv_scales, read_provenance


def default_engine(spec: SweepSpec, gpu: GpuSpec, cfg: RunConfig, model_path: str, log_path: Path) -> Any:
    """The engine (not started) that serves this config from `model_path`."""
    if cfg.engine == EngineKind.LLAMACPP:
        from atlas.engines.llamacpp import LlamaCppEngine

        return LlamaCppEngine(cfg.server, model_path, served_name=launch_name(spec.model.id), host=spec.host, port=spec.port,
                              max_model_len=spec.model.max_model_len, log_path=log_path,
                              startup_timeout_s=spec.startup_timeout_s, env=spec.engine_env,
                              extra_args=spec.extra_engine_args)
    s = cfg.server
    scales = spec.model.kv_scales_checkpoint(s.quantization, s.kv_cache_dtype)
    # fp8_calibrated without a checkpoint that carries scales: only a vLLM that still computes them at
    # start-up gets here (plan.expand skips the point on a newer one)
    calc = s.kv_cache_dtype == KVCacheDtype.FP8_CALIBRATED and not scales
    checkpoint = bool(scales or spec.model.checkpoints.get(s.quantization))
    # a checkpoint with KV scales makes vLLM store an `auto` KV cache in FP8 unless the 16-bit dtype is named
    pin_kv = s.kv_cache_dtype == KVCacheDtype.AUTO and checkpoint and has_kv_scales(model_path)
    return VllmEngine(s, model_path, served_name=launch_name(spec.model.id), host=spec.host, port=spec.port,
                      max_model_len=spec.model.max_model_len, on_cpu=gpu.is_cpu, log_path=log_path,
                      startup_timeout_s=spec.startup_timeout_s, calculate_kv_scales=calc, checkpoint=checkpoint,
                      pin_16bit_kv=pin_kv, env=spec.engine_env, extra_args=spec.extra_engine_args)


class ModelResolver:
    """Resolves each server config's model once per sweep (the embedded conversion and the source GGUF are
    prepared on first use and kept); `note` hears what is being prepared."""

    def __init__(self, spec: SweepSpec, note: Callable[[str], None]):
        self.spec, self.note = spec, note
        self._model: tuple[str, dict] | None = None  # type: ignore[type-arg]
        self._gguf_source: tuple[Path, dict, str] | None = None  # type: ignore[type-arg]

    def resolve(self, server: ServerKnobs) -> tuple[str, dict]:  # type: ignore[type-arg]
        """The model folder, file or hub id this server config serves, and what to record about it."""
        m = self.spec.model
        if server.engine == EngineKind.LLAMACPP:
            return self.gguf(server)
        scales = m.kv_scales_checkpoint(server.quantization, server.kv_cache_dtype)
        if scales:  # this checkpoint stands for the weights too (it is them, with the KV scales added)
            scheme = checkpoint_kv_scheme(scales)  # raises when the checkpoint carries no scales
            return (scales, {"checkpoint": scales, "kv_cache_scheme": scheme, "quantization": read_provenance(scales)})
        if m.source == "embedded":
            if self._model is None:
                self.note("preparing the embedded model (first run converts the GGUF, ~1 min)")
                path, prov = prepare_embedded_model()
                self._model = (str(path), prov)
            return self._model
        ckpt = m.checkpoints.get(server.quantization)
        if not ckpt:
            return (m.path or "", {"revision": m.revision} if m.revision else {})
        if server.kv_cache_dtype == KVCacheDtype.FP8 or server.dtype == Dtype.FLOAT32:
            if has_kv_scales(ckpt):  # vLLM would use them: not the scale-1.0 point, or an FP8 cache for `auto`
                raise CheckpointError(f"model.checkpoints.{server.quantization.value}: {ckpt} carries calibrated "
                                      f"KV-cache scales, which vLLM applies: kv_cache_dtype {server.kv_cache_dtype.value} "
                                      f"with dtype {server.dtype.value} needs a checkpoint without them")
        return (ckpt, {"checkpoint": ckpt, "quantization": read_provenance(ckpt)})

    def gguf(self, server: ServerKnobs) -> tuple[str, dict]:  # type: ignore[type-arg]
        """The GGUF of this weight type: a given file (model.checkpoints), else made from the source GGUF."""
        given = self.spec.model.checkpoints.get(server.quantization)
        if given:
            path = Path(given).expanduser()
            if not path.is_file():
                raise GgufError(f"model.checkpoints.{server.quantization.value}: {given}: no such GGUF file")
            return str(path), {"checkpoint": str(path), "sha256": sha256_file(path)}
        if self._gguf_source is None:
            src, src_prov = source_gguf(self.spec.model)
            self._gguf_source = (src, src_prov, sha256_file(src))
        src, src_prov, src_sha = self._gguf_source
        path, prov = variant(src, server.quantization, src_sha,
                             on_make=lambda q: self.note(f"GGUF {q.value}: making it (once, then cached)"))
        return str(path), {**src_prov, "source_sha256": src_sha, "variant": prov}
