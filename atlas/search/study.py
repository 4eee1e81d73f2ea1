"""The Optuna study a search lives in: in memory for one process, or in a database (PostgreSQL) shared by
workers on many hosts. The study carries the spec, GPU and settings, so a worker needs only its address;
a worker's heartbeat lets the others fail and retry the trial of one that died."""

from __future__ import annotations

import re
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal

import optuna
from optuna.storages import BaseStorage, InMemoryStorage, RDBStorage, RetryHeartbeatStaleTrialCallback

from atlas.config import SweepSpec, parse_spec
from atlas.engines.adapter import Caps
from atlas.search import SearchError
from atlas.search.settings import SearchSettings

HEARTBEAT_S = 10  # a worker marks its running trial alive this often
GRACE_S = 60  # after this long without a heartbeat, another worker fails the trial and queues it again
MAX_RETRIES = 2  # a point whose worker died this many times is left for a person to look at

optuna.logging.set_verbosity(optuna.logging.WARNING)


QUALITY_ATTR = "quality:"  # study attribute per numerics: "quality:<engine>/<dtype>/<weights>/<kv>"


def quality_attr(key: tuple[str, ...]) -> str:
    return QUALITY_ATTR + "/".join(key)


def quality_keys(attrs: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    """The numerics whose quality the study holds, by attribute name."""
    return {name: tuple(name.removeprefix(QUALITY_ATTR).split("/")) for name in attrs if name.startswith(QUALITY_ATTR)}


def redact(url: str) -> str:
    """A storage address without its password, for messages."""
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", url)


class StudyHandle:
    """A study and the storage behind it (kept to send heartbeats)."""

    def __init__(self, study: optuna.Study, storage: BaseStorage, spec: SweepSpec, gpu: str,
                 settings: SearchSettings, caps: dict[str, Caps] | None = None):
        self.study, self.storage, self.spec, self.gpu, self.settings = study, storage, spec, gpu, settings
        self.caps = caps  # the creating host's engines: every worker plans the same points with them

    @contextmanager
    def heartbeat(self, trial: optuna.trial.Trial) -> Iterator[None]:
        """Marks the trial alive every HEARTBEAT_S while the block runs (database studies only)."""
        if not isinstance(self.storage, RDBStorage):
            yield
            return
        stop = threading.Event()
        storage = self.storage
        trial_id = trial._trial_id  # Optuna's own heartbeat thread uses the same id

        def beat() -> None:
            while True:
                try:
                    storage.record_heartbeat(trial_id)
                except Exception:  # a passing database error: the next beat tries again
                    pass
                if stop.wait(storage.heartbeat_interval or HEARTBEAT_S):
                    return

        t = threading.Thread(target=beat, name="atlas-heartbeat", daemon=True)
        t.start()
        try:
            yield
        finally:
            stop.set()
            t.join(timeout=5)


def _storage(url: str | None, heartbeat_s: int, grace_s: int) -> BaseStorage:
    if url is None:
        return InMemoryStorage()
    if not re.match(r"^[a-z0-9+]+://", url):
        raise SearchError(f"--storage {url!r}: expected a database URL such as postgresql://user:pw@host/db")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        try:
            return RDBStorage(url, heartbeat_interval=heartbeat_s, grace_period=grace_s,
                              heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(max_retry=MAX_RETRIES),
                              engine_kwargs={"pool_pre_ping": True})
        except Exception as e:  # SQLAlchemy raises many kinds (driver missing, refused, auth)
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise SearchError(f"{redact(url)}: cannot open the study storage: {first}") from None


def _directions(settings: SearchSettings) -> list[Literal["minimize", "maximize"]]:
    return ["minimize" if o.sense == "min" else "maximize" for o in settings.objectives]


def create_study(spec: SweepSpec, gpu: str, settings: SearchSettings, storage_url: str | None = None,
                 name: str | None = None, heartbeat_s: int = HEARTBEAT_S, grace_s: int = GRACE_S,
                 caps: dict[str, Caps] | None = None) -> StudyHandle:
    """A new study for this spec on this GPU, or the existing one of that name if it was made for the same
    spec, GPU and settings (so the command that made it can be run again to add a worker)."""
    storage = _storage(storage_url, heartbeat_s, grace_s)
    name = name or f"{spec.name}-{gpu}"
    attrs = {"atlas:spec": spec.model_dump(mode="json"), "atlas:gpu": gpu,
             "atlas:settings": settings.model_dump(mode="json"), "atlas:heartbeat": [heartbeat_s, grace_s],
             "atlas:caps": caps or None}
    try:
        study = optuna.create_study(storage=storage, study_name=name, directions=_directions(settings),
                                    load_if_exists=True)
    except Exception as e:
        raise SearchError(f"study {name!r}: cannot be created: {str(e).splitlines()[0]}") from None
    existing = study.user_attrs
    if "atlas:spec" in existing:
        for k, v in attrs.items():
            if k in existing and existing[k] != v:  # (a study made before a key existed lacks it)
                raise SearchError(f"study {name!r} already exists with another {k.split(':')[1]}; "
                                  "give another --study name, or join it with `atlas worker`")
    else:
        for k, v in attrs.items():
            study.set_user_attr(k, v)
        existing = attrs
    return StudyHandle(study, storage, spec, gpu, settings, _caps(existing))


def join_study(storage_url: str, name: str) -> StudyHandle:
    """An existing study, with the spec, GPU, settings and heartbeat timing it was made with."""
    probe = _storage(storage_url, HEARTBEAT_S, GRACE_S)
    try:
        attrs: dict[str, Any] = optuna.load_study(study_name=name, storage=probe).user_attrs
    except KeyError:
        raise SearchError(f"no study {name!r} in {redact(storage_url)} (start one with `atlas sweep "
                          "--strategy ... --storage ...`)") from None
    finally:
        if isinstance(probe, RDBStorage):
            probe.engine.dispose()  # only read the heartbeat timing; the storage below is the one kept
    if "atlas:spec" not in attrs:
        raise SearchError(f"study {name!r} in {redact(storage_url)} was not made by Atlas")
    heartbeat_s, grace_s = attrs.get("atlas:heartbeat", [HEARTBEAT_S, GRACE_S])
    storage = _storage(storage_url, int(heartbeat_s), int(grace_s))  # every worker fails stale trials alike
    study = optuna.load_study(study_name=name, storage=storage)
    spec = parse_spec(attrs["atlas:spec"], f"study {name}")
    settings = SearchSettings.model_validate(attrs["atlas:settings"])
    return StudyHandle(study, storage, spec, str(attrs["atlas:gpu"]), settings, _caps(attrs))


def _caps(attrs: dict[str, Any]) -> dict[str, Caps] | None:
    """What each engine accepted where the study was planned (None: not recorded); a study made before caps
    were per engine recorded only vLLM's."""
    if attrs.get("atlas:caps"):
        return dict(attrs["atlas:caps"])
    return {"vllm": attrs["atlas:vllm"]} if attrs.get("atlas:vllm") else None
