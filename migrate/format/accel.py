"""The one switch for the optional C accelerator (``migrate/format/_speedups.c``).

Every module binds its implementation once, at import, through this module, and never tests the switch itself::

    from migrate.format import accel

    _crc_ranges = accel.pick(accel.compiled("crc_ranges"), crc_ranges)  # the compiled twin, or the reference

``pick`` is the only place the switch is read: with the accelerator off, every module runs its Python reference
(same results, slower), and a function built on the accelerator is never called.

The accelerator is used when it was built at install time and the environment variable
``KAFKA_LOG_MIGRATE_NO_EXTENSIONS`` is unset, empty or ``0`` (``migrate.extensions``, the switch every compiled
module of the package obeys). It is read once, when this module is first imported.

``status()`` says whether the accelerator is active and, if not, why; ``dataclasses.asdict(status())`` gives a
JSON-ready ``{"active": ..., "reason": ...}``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from migrate.extensions import ENV_VAR, Status, load

__all__ = ["ENV_VAR", "Status", "compiled", "pick", "speedups", "status"]

F = TypeVar("F", bound=Callable[..., Any])

speedups, _STATUS = load("migrate.format._speedups")


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
