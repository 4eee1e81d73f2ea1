"""Base classes of every typed spec model: frozen, extra fields forbidden, no NaN or infinity, and fields added
after results existed kept out of the serialized form while unset (so old run ids stay valid)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer


class Frozen(BaseModel):
    # NaN and infinity are never a knob's value (a NaN rate ran as "ok" and crashed the frontier)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class LateFields(Frozen):
    """A model whose fields added after results existed (`_late_fields`) are left out of its serialized form
    while unset, so the run ids of configs measured before a field existed stay the same."""

    _late_fields: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _drop_unset_late_fields(self, handler: SerializerFunctionWrapHandler) -> dict:  # type: ignore[type-arg]
        out = handler(self)
        for name in self._late_fields:
            if out.get(name) is None:
                out.pop(name, None)
        return out  # type: ignore[no-any-return]
