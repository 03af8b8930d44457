"""Helpers for segment-layer tests: convert fixture segments into a scratch log dir."""

from __future__ import annotations

from pathlib import Path

from migrate.model import ConvertOptions, SegmentResult, SegmentTask
from migrate.segment.convert import convert_segment


def convert_logdir(logdir: Path, out: Path, options: ConvertOptions) -> dict[str, SegmentResult]:
    """Convert every valid segment of ``logdir`` into ``out/<partition>/``; results keyed by 'partition/file'."""
    results = {}
    for log in sorted(logdir.glob("*/*.log")):
        if log.parent.name.startswith("truncated-tail"):
            continue
        task = SegmentTask(str(log), str(out / log.parent.name), int(log.stem), options)
        results[f"{log.parent.name}/{log.name}"] = convert_segment(task)
    return results
