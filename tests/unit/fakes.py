"""Stand-ins for GPU-only libraries in unit tests."""

import sys
import types


def fake_llmcompressor(monkeypatch, calls, new_awq=True):
    """llm-compressor and datasets stand-ins: modifiers keep their keyword arguments, oneshot records its own."""
    class Mod:
        def __init__(self, **kw):
            self.kw = kw

    quant = types.ModuleType("llmcompressor.modifiers.quantization")
    quant.GPTQModifier = type("GPTQModifier", (Mod,), {})
    quant.QuantizationModifier = type("QuantizationModifier", (Mod,), {})
    awq = types.ModuleType("llmcompressor.modifiers.transform.awq")
    awq.AWQModifier = type("AWQModifier", (Mod,), {})
    root = types.ModuleType("llmcompressor")
    root.oneshot = lambda **kw: calls.update(kw)
    datasets = types.ModuleType("datasets")
    datasets.Dataset = types.SimpleNamespace(from_dict=lambda d: ("dataset", len(d["text"])))
    mods = {"llmcompressor": root, "llmcompressor.modifiers": types.ModuleType("m"),
            "llmcompressor.modifiers.quantization": quant, "datasets": datasets,
            "llmcompressor.modifiers.transform.awq": awq if new_awq else None}
    for name, mod in mods.items():
        monkeypatch.setitem(sys.modules, name, mod)
