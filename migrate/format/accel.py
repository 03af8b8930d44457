"""The one switch for the optional C accelerator (``migrate/format/_speedups.c``).

Every module binds its implementation once, at import, through this module, and never tests the switch itself::

    from migrate.format import accel

    _crc_ranges = accel.pick(accel.compiled("crc_ranges"), crc_ranges)  # the compiled twin, or the reference

``pick`` is the only place the switch is read: with the accelerator off, every module runs its Python reference
(same results, slower), and a function built on the accelerator is never called.

The accelerator is used when it was built at install time (``setup.py`` builds it when a C compiler is present and
skips it otherwise) and the environment variable ``KAFKA_LOG_MIGRATE_NO_EXTENSIONS`` is unset, empty or ``0``. Any
other value (``1``) makes the whole package use the Python references, for example to check a result or to rule
the extension out when chasing a problem. The variable is read once, when this module is first imported: set it
in the environment of the process (a subprocess for tests), not in the middle of a run.

``status()`` says whether the accelerator is active and, if not, why; ``dataclasses.asdict(status())`` gives a
JSON-ready ``{"active": ..., "reason": ...}``.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

ENV_VAR = "KAFKA_LOG_MIGRATE_NO_EXTENSIONS"


@dataclass(frozen=True, slots=True)
class Status:
    """Whether the C accelerator is in use, and a one-line reason either way."""

    active: bool
    reason: str


def _load(name: str = "migrate.format._speedups") -> tuple[ModuleType | None, Status]:
    setting = os.environ.get(ENV_VAR, "")
    if setting not in ("", "0"):
        return None, Status(False, f"disabled by {ENV_VAR}={setting}")
    try:
        # import_module, not "from migrate.format import _speedups": that turns a missing module into a plain
        # ImportError, which could not be told from a built module that fails to load
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name != name:
            raise
        return None, Status(False, "not built (no C compiler at install time)")
    except ImportError as exc:  # built for another Python, or a missing symbol: the references still work
        return None, Status(False, f"built but not loadable: {exc}")
    return module, Status(True, "C accelerator built and enabled")


speedups, _STATUS = _load()


def extension(name: str) -> ModuleType | None:
    """Another compiled module of the package (``setup.py`` builds it beside ``_speedups``, under the same switch):
    the module, or None when the accelerator is switched off or the module was not built, and its caller binds
    its Python twin instead (as ``pick`` does)."""
    return _load(name)[0] if speedups is not None else None


def status() -> Status:
    """Whether the C accelerator is in use (``active``) and why or why not (``reason``)."""
    return _STATUS


def pick(accelerated: F, reference: F) -> F:
    """The implementation this process uses: ``accelerated`` (a compiled function, or Python built on them) when the
    accelerator is active, else ``reference``, the Python twin with the same results."""
    return reference if speedups is None else accelerated


def compiled(name: str) -> Callable[..., Any]:
    """The accelerator's function ``name``, to hand to ``pick``; without the accelerator, a stand-in that refuses to
    run (``pick`` never returns it then)."""
    if speedups is not None:
        return getattr(speedups, name)

    def not_built(*args: object) -> Any:
        raise RuntimeError(f"the C accelerator's {name} was called while the accelerator is off: {_STATUS.reason}")

    return not_built
