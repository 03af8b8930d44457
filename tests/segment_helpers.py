"""Helpers for segment-layer tests: convert fixture segments into a scratch log dir."""

from __future__ import annotations

import itertools
from pathlib import Path

from migrate.model.plan_tree import ConvertOptions
from migrate.model.run_state import SegmentResult, SegmentTask
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


def range_cuts(size: int, count: int) -> list[tuple[int, int]]:
    """``count`` nominal byte ranges of a file of ``size`` bytes, as make_tasks cuts them."""
    cuts = [size * i // count for i in range(count + 1)]
    return list(itertools.pairwise(cuts))


def planned_ranges(path: Path, count: int) -> list:
    """The ``ByteRange``s ``plan`` makes of the segment at ``path`` cut into ``count`` nominal ranges: with the
    places of their outputs when the plan can predict them."""
    from migrate.planning.plan import byte_ranges
    from migrate.segment.profile import profile_segment

    size = path.stat().st_size
    cuts = [size * i // count for i in range(count + 1)]
    return byte_ranges(cuts, profile_segment(path, cuts=cuts[1:-1]).range_cuts)


def convert_in_ranges(
    task: SegmentTask,
    cuts: list[tuple[int, int]],
    run: str | None = None,
    order: list[int] | None = None,
    outputs: list[tuple[int, int] | None] | None = None,
) -> tuple[SegmentResult, list]:
    """``task`` converted the way range tasks and their join do it: each nominal range on its own (in ``order``;
    with ``run``, each placing what it can in the joined file, or writing straight into its place in ``outputs``),
    then joined. Returns the joined result and the parts as the range tasks returned them."""
    from migrate.segment.ranges import convert_range, join_parts

    parts = {}
    for i in order if order is not None else range(len(cuts)):
        output = outputs[i] if outputs is not None else None
        parts[i] = convert_range(task, i, len(cuts), *cuts[i], run=run, output=output)
    ordered = [parts[i] for i in range(len(cuts))]
    return join_parts(task, ordered, run), ordered
