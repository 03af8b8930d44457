"""An engine, watched: each stage logged (calls, seconds, errors) in the run log, named on the progress line, and an
unexpected exception's traceback kept where it happened; the verbs wrap whichever engine they chose in it."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from migrate.engines import CallResult, Engine, Fold, StageCall
from migrate.errors import MigrateError
from migrate.model.run_state import Stage
from migrate.watch.runlog import Progress

logger = logging.getLogger("migrate.run")


@dataclass(frozen=True)
class Traced:
    """A stage function that logs an unexpected exception's traceback where it happens, then raises it on (the
    engine reports it as a message). A refusal (MigrateError) says everything in its message."""

    fn: Callable[..., Any]
    stage: str

    def __call__(self, *args: Any) -> Any:
        try:
            return self.fn(*args)
        except MigrateError:
            raise
        except Exception:
            logging.getLogger("migrate.stages").exception("unexpected error in stage %s", self.stage)
            raise


def _fed(progress: Progress, stage: Stage, fold: Fold) -> Fold:
    """``fold``, each result shown to ``progress`` first."""

    def fed(index: int, r: CallResult) -> CallResult:
        if r.ok:
            progress.returned(stage, r.value)
        return fold(index, r)

    return fed


class WatchedEngine:
    """``engine``, with each stage logged (calls, seconds, errors), named on the progress line, and traced."""

    def __init__(self, engine: Engine, progress: Progress | None = None) -> None:
        self.engine = engine
        self.name = engine.name
        self.shares_files = engine.shares_files
        self.progress = progress

    def map(
        self, stage: Stage, fn: Callable[..., Any], calls: list[StageCall], fold: Fold | None = None
    ) -> list[CallResult]:
        if self.progress is not None:
            self.progress.stage(stage)
        logger.info("stage %s: %d call(s)", stage, len(calls))
        started = time.perf_counter()
        progress = self.progress
        # the progress line takes each result's outcomes before the caller's fold keeps only what is left of it
        chained = fold if progress is None or fold is None else _fed(progress, stage, fold)
        results = self.engine.map(stage, Traced(fn, stage), calls, chained)
        failed = [r for r in results if not r.ok]
        logger.info(
            "stage %s: %d of %d call(s) ok in %.1f s",
            stage,
            len(results) - len(failed),
            len(results),
            time.perf_counter() - started,
        )
        for r in failed:
            logger.warning("stage %s: %s: %s", stage, r.error_type or "error", r.error)
        if progress is not None and fold is None:
            for r in results:
                if r.ok:
                    progress.returned(stage, r.value)
        return results

    def close(self) -> None:
        self.engine.close()

    def __getattr__(self, name: str) -> Any:  # dashboard_link and the like
        return getattr(self.engine, name)
