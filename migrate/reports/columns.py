"""Text tables whose columns fit their content: widths computed from the cells, so a long topic name widens its
column instead of pushing the next one out of line."""

from __future__ import annotations

from collections.abc import Sequence


def aligned(
    rows: Sequence[Sequence[str]], indent: str = "  ", gap: str = "  ", right: frozenset[int] = frozenset()
) -> list[str]:
    """``rows`` as lines, each column as wide as its widest cell (the last column is not padded); ``right``: the
    indexes of columns aligned right (numbers)."""
    if not rows:
        return []
    width = [max(len(row[i]) if i < len(row) else 0 for row in rows) for i in range(max(len(r) for r in rows))]
    lines = []
    for row in rows:
        cells = [
            (cell.rjust(width[i]) if i in right else cell if i == len(row) - 1 else cell.ljust(width[i]))
            for i, cell in enumerate(row)
        ]
        lines.append((indent + gap.join(cells)).rstrip())
    return lines
