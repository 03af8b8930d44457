"""A client's records against Kafka's reader of the same log dir: every record read once, each equal in offset,
key, value, headers and timestamp, nothing else; or what was lost and what was wrong.

A difference is excused only when it is one of ``KNOWN``: a client's own documented way, narrowly matched (the exact
difference, in that client only), and every excused record is still listed with its reason. A partition withheld from
a client (kafkajs has no zstd codec) is not counted, and the verdict names it.

``summary`` has the counts; ``cell`` says the same in words that do not change from one run of the same client over
the same data to the next (a client that aborts mid-way loses a different number of records each time): the README's
table is made of cells.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

from migrate.consumers.expected import Expected
from migrate.consumers.records import (
    ClientKind,
    ClientRun,
    ClientVerdict,
    ConsumedRecord,
    Difference,
    Outcome,
    RecordFacts,
)

MAX_DIFFERENCES = 20
FIELDS = ("key", "value", "headers", "timestamp")


def _nul_cut_names(kind: ClientKind, expected: RecordFacts, got: RecordFacts, fields: list[str]) -> str:
    """librdkafka's header API takes a header name as a C string: it ends at the name's first NUL byte."""
    cut = tuple(n.split("\x00", 1)[0] for n in expected.header_names)
    if (
        kind == ClientKind.CONFLUENT
        and fields == ["headers"]
        and cut != expected.header_names
        and got.header_names == cut
        and got.header_values == expected.header_values
    ):
        return "librdkafka ends a header name at its first NUL byte (its headers API takes C strings)"
    return ""


KNOWN: tuple[Callable[[ClientKind, RecordFacts, RecordFacts, list[str]], str], ...] = (_nul_cut_names,)


def _differing(expected: RecordFacts, got: RecordFacts) -> list[str]:
    fields = [f for f in FIELDS if getattr(expected, f) != getattr(got, f)]
    return [f for f in fields if f != "timestamp" or expected.timestamp is not None]


def judge(
    run: ClientRun,
    records: Iterable[ConsumedRecord],
    expected: Expected,
    log_dir: str,
) -> ClientVerdict:
    """``expected``: Kafka's records of exactly the partitions given to the client."""
    got: dict[tuple[str, int], dict[int, RecordFacts]] = {}
    duplicates = 0
    for r in records:
        seen = got.setdefault((r.topic, r.partition), {})
        if r.offset in seen:
            duplicates += 1
            continue
        seen[r.offset] = RecordFacts.of(r.key, r.value, r.headers, r.timestamp)
    differences: list[Difference] = []
    equal = lost = wrong = known = extra = 0
    wrong_by_field: Counter[str] = Counter()
    incomplete: list[str] = []

    def note(difference: Difference) -> None:
        if len(differences) < MAX_DIFFERENCES:
            differences.append(difference)

    for key, want in sorted(expected.items()):
        name = f"{key[0]}-{key[1]}"
        have = got.get(key, {})
        missing = 0
        for offset, e in sorted(want.items()):
            g = have.get(offset)
            if g is None:
                missing += 1
                note(Difference(name, offset, "lost"))
                continue
            fields = _differing(e, g)
            if not fields:
                equal += 1
                continue
            reason = next((r for r in (k(run.kind, e, g, fields) for k in KNOWN) if r), "")
            if reason:
                known += 1
            else:
                wrong += 1
                wrong_by_field.update(fields)
            detail = ""
            if "timestamp" in fields:
                detail = f"timestamp {g.timestamp}, Kafka's reader {e.timestamp}"
            elif "headers" in fields:
                detail = f"header names {list(g.header_names)}, Kafka's reader {list(e.header_names)}"
            note(Difference(name, offset, ",".join(fields), detail, reason))
        lost += missing
        if missing:
            incomplete.append(f"{name} ({missing} of {len(want)} lost)")
        for offset in sorted(set(have) - set(want)):
            extra += 1
            note(Difference(name, offset, "extra"))
    for key in sorted(set(got) - set(expected)):
        extra += len(got[key])
        note(Difference(f"{key[0]}-{key[1]}", min(got[key]), "extra", "a partition it was not given"))
    total = sum(len(w) for w in expected.values())
    read = sum(len(g) for g in got.values())
    if lost or extra or duplicates:
        outcome = Outcome.LOSES
    elif wrong:
        outcome = Outcome.WRONG
    else:
        outcome = Outcome.KNOWN if known else Outcome.EQUAL
    withheld = f"; not given {', '.join(run.withheld)}" if run.withheld else ""
    if outcome == Outcome.EQUAL:
        summary = f"all {total:,} records read, each equal to Kafka's reader{withheld}"
    elif outcome == Outcome.KNOWN:
        summary = f"all {total:,} records read; {known:,} differ only in a known way{withheld}"
    else:
        parts = [f"{read:,} of {total:,} records read", f"{lost:,} lost"]
        if wrong:
            parts.append(f"{wrong:,} wrong ({', '.join(f'{n} {f}' for f, n in sorted(wrong_by_field.items()))})")
        if extra:
            parts.append(f"{extra:,} not in the log")
        if duplicates:
            parts.append(f"{duplicates:,} handed over twice")
        summary = "; ".join(parts) + f"; {run.errors:,} errors; {run.exit}{withheld}"
    return ClientVerdict(
        kind=run.kind,
        label=run.label,
        log_dir=log_dir,
        outcome=outcome,
        expected=total,
        read=read,
        equal=equal,
        lost=lost,
        wrong=wrong,
        known=known,
        extra=extra,
        duplicates=duplicates,
        errors=run.errors,
        end=run.end,
        exit=run.exit,
        seconds=run.seconds,
        summary=summary,
        wrong_by_field=dict(sorted(wrong_by_field.items())),
        incomplete=tuple(incomplete),
        withheld=run.withheld,
        first_errors=run.first_errors,
        differences=tuple(differences),
        error_kinds=run.error_kinds,
    )


def cell(verdict: ClientVerdict) -> str:
    """The verdict in words that stay the same from run to run (see the module docstring)."""
    withheld = f" ({len(verdict.withheld)} zstd partitions not given: no codec)" if verdict.withheld else ""
    if verdict.outcome == Outcome.EQUAL:
        return f"all {verdict.expected:,} exact{withheld}"
    if verdict.outcome == Outcome.KNOWN:
        reasons = sorted({d.known for d in verdict.differences if d.known})
        return f"all {verdict.expected:,}; {verdict.known:,} differ as known: {'; '.join(reasons)}{withheld}"
    if verdict.outcome == Outcome.UNAVAILABLE:
        return f"not run: {verdict.end}"
    if verdict.outcome == Outcome.WRONG:
        fields = ", ".join(f"{n:,} {f}" for f, n in verdict.wrong_by_field.items())
        return f"ALTERS RECORDS: {fields} of {verdict.expected:,} not as Kafka reads them{withheld}"
    causes = []
    if verdict.exit.startswith(("killed by", "ended by")):
        causes.append(f"aborts ({verdict.exit.split(' by ', 1)[1].split(' ')[0]})")
    common = most_common_error(verdict.error_kinds)
    if common:
        causes.append(common)
    if not causes:
        causes.append("stops, with no error")
    return f"LOSES RECORDS: {'; '.join(causes)}{withheld}"


def most_common_error(kinds: dict[str, int]) -> str:
    """The error a run reported most often, numbers taken out (ties: the first in name order)."""
    if not kinds:
        return ""
    best = max(kinds.values())
    return min(e for e, n in kinds.items() if n == best)
