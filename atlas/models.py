"""Base classes of every typed spec model: frozen, extra fields forbidden, no NaN or infinity, and fields added
after results existed kept out of the serialized form while unset (so old run ids stay valid)."""

from __future__ import annotations

from pathlib import Path
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


def read_text(p: Path, what: str, error: type[Exception]) -> str:
    """A file's UTF-8 text, or `error` with one line naming the file: not text, or not readable."""
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise error(f"{p}: not a {what} text file (byte {e.start} is not UTF-8)") from None
    except OSError as e:
        raise error(f"{p}: cannot read {what}: {e.strerror or e}") from None
