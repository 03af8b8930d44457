"""The one switch for the package's optional compiled modules: C twins of hot Python loops, each used only when it
was built at install time (``setup.py`` builds them when a C compiler is present and skips them otherwise) and the
environment variable ``KAFKA_LOG_MIGRATE_NO_EXTENSIONS`` is unset, empty or ``0``. Any other value (``1``) makes the
whole package use the Python twins, for example to check a result or to rule a compiled module out when chasing a
problem. The variable is read when a module is loaded, at import: set it in the environment of the process (a
subprocess for tests), not in the middle of a run.

The format layer's hot loops (``migrate/format/_speedups.c``) are bound through ``migrate.format.accel``. A room low
enough for every layer to import it.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from types import ModuleType

ENV_VAR = "KAFKA_LOG_MIGRATE_NO_EXTENSIONS"


@dataclass(frozen=True, slots=True)
class Status:
    """Whether a compiled module is in use, and a one-line reason either way."""

    active: bool
    reason: str


def load(name: str) -> tuple[ModuleType | None, Status]:
    """The compiled module ``name`` and why it is used, or None and why not (its caller then binds the Python
    twin)."""
    setting = os.environ.get(ENV_VAR, "")
    if setting not in ("", "0"):
        return None, Status(False, f"disabled by {ENV_VAR}={setting}")
    try:
        # import_module, not "from package import _module": that turns a missing module into a plain ImportError,
        # which could not be told from a built module that fails to load
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name != name:
            raise
        return None, Status(False, "not built (no C compiler at install time)")
    except ImportError as exc:  # built for another Python, or a missing symbol: the twins still work
        return None, Status(False, f"built but not loadable: {exc}")
    return module, Status(True, "C accelerator built and enabled")
