"""swap: under Kafka's .lock and the fence, every ready partition of a log dir changes directory whole, a batch at a
time.

Per batch of partitions: each partition's live files checked against what its conversions saw (a file changed since
fails its partition, untouched); its new directory completed (``migrate.run.partition.moves.build``: hard links to
everything that does not change; a cut-over's staging dir gets the window's outputs first) and its record written
into it; one syncfs; the batch's directories committed to the state; then each partition moved in (into the fence,
exchanged with the live path, the original kept inside the new directory); one syncfs; the batch committed migrated.
A partition whose swap began (``swapping``, after a crash) is finished first, from wherever it stands. A partition a
move fails for alone (an immutable directory: EPERM) is moved back and failed, and the others go on; any other I/O
error stops the stage with the fence up, at a state that ``execute`` and ``rollback`` both finish. The fence comes
down only when no partition has a directory in it.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from dataclasses import dataclass

from migrate.errors import LocatedError, MigrateError, ProblemKind, SourceChangedError, StateWriteError
from migrate.kafka.names import FileKind, segment_name
from migrate.model.plan_tree import ExchangeMethod, PartitionPlan, Plan
from migrate.model.run_state import (
    EventKind,
    FileStat,
    LogDirPhase,
    PartitionExchange,
    PartitionState,
    Problem,
    SegmentState,
    Standing,
)
from migrate.model.stage_reports import PartitionProblem, SwapReport
from migrate.prestage.cutover import complete_staged_dir, plan_staging_tree
from migrate.prestage.tree import StagingTree
from migrate.run import faults, fence
from migrate.run.exchange import rename_noreplace
from migrate.run.partition.after import PRESTAGE_RECORD_SUFFIX
from migrate.run.partition.moves import (
    Place,
    build,
    built_place,
    cold_place,
    move_in,
    move_out,
    supports_exchange,
    write_record_in,
)
from migrate.run.partition.places import PartitionPlaces
from migrate.run.partition.reconcile import open_reconciled, places_of
from migrate.run.partition.record import record_text
from migrate.run.partition.sources import ResultFacts, result_facts
from migrate.run.partition.standing import standing
from migrate.run.state import StateStore
from migrate.run.workspace import sync_filesystem
from migrate.stages.common import kafka_lock, locate

# a batch's partitions share one syncfs before their first move and one after their last
SWAP_BATCH_PARTITIONS = 256
_ISOLATED_ERRNOS = (errno.EPERM, errno.EACCES)  # one directory's attribute or permission: its partition only


def swap_log_dir(plan: Plan, key: str, swap_ready: bool = True) -> SwapReport:
    """``swap_ready=False`` (the run stopped on an I/O error in this log dir): only finish partitions a crash left
    mid-swap and lower the fence if nothing is in it; ready partitions wait for the next execute."""
    entry, log_dir = locate(plan, key)
    opened, _ = open_reconciled(plan, key, entry, log_dir, write=True)
    if opened is None:
        raise MigrateError(
            f"{log_dir}: no run of plan {plan.plan_id} has begun here; run `execute` (it prepares first)"
        )
    with opened as store:
        if store.phase in (LogDirPhase.FINALIZED, LogDirPhase.ROLLING_BACK, LogDirPhase.ROLLED_BACK):
            return SwapReport(key, (), (), (), fence.is_up(log_dir))
        migrated: list[str] = []
        failed: list[PartitionProblem] = []
        stopped: Problem | None = None
        with kafka_lock(log_dir, store), plan_staging_tree(entry.log_dir, entry.staging_dir) as tree:
            if fence.raise_fence(log_dir, plan.plan_id):
                store.record_event(EventKind.FENCE_UP)
            try:
                done, failed = _finish_swapping(plan, key, store, tree)
                migrated += done
                ready = store.partitions_in(PartitionState.READY) if swap_ready else []
                method = _method(plan, key, store) if ready else ExchangeMethod.EXCHANGE
                for batch in _batches(ready):
                    done, bad = _swap_batch(plan, key, store, batch, method, tree)
                    migrated += done
                    failed += bad
            except (OSError, StateWriteError) as exc:
                stopped = Problem.of(exc) if isinstance(exc, OSError) else Problem(ProblemKind.IO_ERROR, str(exc))
            mixed = _mixed(plan, key, store)
            try:
                if not mixed and fence.lower_fence(log_dir):
                    store.record_event(EventKind.FENCE_DOWN)
                if stopped is None and not store.partitions_in(
                    *(s for s in PartitionState if s != PartitionState.MIGRATED)
                ):
                    store.set_phase(LogDirPhase.MIGRATED)
                store.record_event(EventKind.RUN_ENDED, verb="execute", migrated=len(migrated), failed=len(failed))
            except (OSError, StateWriteError) as exc:  # a full disk may refuse the record; the fence is the truth
                stopped = stopped or (
                    Problem.of(exc) if isinstance(exc, OSError) else Problem(ProblemKind.IO_ERROR, str(exc))
                )
        return SwapReport(key, tuple(migrated), tuple(failed), tuple(mixed), fence.is_up(log_dir), stopped)


def _method(plan: Plan, key: str, store: StateStore) -> ExchangeMethod:
    """The log dir's way of changing directories: the plan's, where the filesystem answers the exchange when asked
    (tried in the fence's own directory), else two renames, said in the history."""
    entry = plan.log_dir(key)
    if entry.swap_method == ExchangeMethod.RENAMES:
        return ExchangeMethod.RENAMES
    if supports_exchange(str(fence.fence_path(entry.log_dir))):
        return ExchangeMethod.EXCHANGE
    store.record_event(EventKind.EXCHANGE_REFUSED, fallback=ExchangeMethod.RENAMES.value)
    return ExchangeMethod.RENAMES


def _batches(names: list[str]) -> Iterator[list[str]]:
    for i in range(0, len(names), SWAP_BATCH_PARTITIONS):
        yield names[i : i + SWAP_BATCH_PARTITIONS]


def _close(place: Place | None) -> None:
    if place is not None:
        place.close()


def _finish_swapping(
    plan: Plan, key: str, store: StateStore, tree: StagingTree | None
) -> tuple[list[str], list[PartitionProblem]]:
    """Partitions a crash left mid-swap, taken in from wherever they stand; one whose original is still at its path
    is checked again first (a source changed since its conversion: its new directory removed, the partition left
    wholly original and failed)."""
    done: list[str] = []
    failed: list[PartitionProblem] = []
    for name in store.partitions_in(PartitionState.SWAPPING):
        exchange = store.exchange_of(name)
        if exchange is None:
            continue  # never moved: prepared again with the ready ones
        places = places_of(plan, key, name)
        place = built_place(places, exchange.new, tree.fd if tree is not None else None)
        try:
            if standing(places, exchange.original, exchange.new) in (Standing.BUILT, Standing.IN_FENCE):
                try:
                    for base, text in store.verified_texts_of(name):
                        if text is not None:
                            _check_sources(plan.partition(key, name), result_facts(base, text))
                except SourceChangedError as exc:
                    move_out(places, exchange.original, exchange.new, exchange.method, place)
                    problem = Problem.of(exc)
                    store.fail_partition(name, problem)
                    failed.append(PartitionProblem(name, problem))
                    continue
            move_in(places, exchange.original, exchange.new, exchange.method, place)
        finally:
            _close(place)
        done.append(name)
    if done:
        sync_filesystem(plan.log_dir(key).log_dir)
        store.set_partitions(done, PartitionState.MIGRATED, EventKind.PARTITION_MIGRATED, SegmentState.SWAPPED)
    return done, failed


@dataclass(frozen=True)
class _Prepared:
    name: str
    places: PartitionPlaces
    exchange: PartitionExchange
    place: Place


def _swap_batch(
    plan: Plan, key: str, store: StateStore, names: list[str], method: ExchangeMethod, tree: StagingTree | None
) -> tuple[list[str], list[PartitionProblem]]:
    prepared: list[_Prepared] = []
    failed: list[PartitionProblem] = []
    try:
        for name in names:
            try:
                prepared.append(_prepare(plan, key, store, name, method, tree))
            except (LocatedError, MigrateError) as exc:
                failed.append(PartitionProblem(name, Problem.of(exc)))
            except OSError as exc:
                if exc.errno not in _ISOLATED_ERRNOS:
                    raise
                failed.append(PartitionProblem(name, Problem.of(exc)))
        for refused in failed:
            store.fail_partition(refused.partition, refused.problem)
        if not prepared:
            return [], failed
        # the new directories, their hard links and their records durable before the first of them moves
        sync_filesystem(plan.log_dir(key).log_dir)
        store.begin_exchange([(p.name, p.exchange) for p in prepared])
        done = []
        for p in prepared:
            try:
                move_in(p.places, p.exchange.original, p.exchange.new, p.exchange.method, p.place)
                done.append(p.name)
            except OSError as exc:
                problem = Problem.of(exc)
                if exc.errno not in _ISOLATED_ERRNOS:
                    _settle(plan, key, store, done)
                    raise
                if _undo(p):
                    store.fail_partition(p.name, problem)
                    failed.append(PartitionProblem(p.name, problem))
        faults.point("before:syncfs-swap")
        _settle(plan, key, store, done)
        return done, failed
    finally:
        for p in prepared:
            _close(p.place)


def _settle(plan: Plan, key: str, store: StateStore, done: list[str]) -> None:
    if done:
        sync_filesystem(plan.log_dir(key).log_dir)
        store.set_partitions(done, PartitionState.MIGRATED, EventKind.PARTITION_MIGRATED, SegmentState.SWAPPED)


def _undo(p: _Prepared) -> bool:
    """A partition a move failed for, back to its original; True if it is wholly original again."""
    try:
        move_out(p.places, p.exchange.original, p.exchange.new, p.exchange.method, p.place)
        sync_filesystem(p.places.log_dir)
    except (OSError, MigrateError):
        return False  # stays swapping: the fence stays up and the next execute or rollback finishes it
    return True


def _prepare(
    plan: Plan, key: str, store: StateStore, name: str, method: ExchangeMethod, tree: StagingTree | None
) -> _Prepared:
    """One partition made ready to move: its sources checked, its new directory completed, its record written."""
    part = plan.partition(key, name)
    places = places_of(plan, key, name)
    texts = [(base, text) for base, text in store.verified_texts_of(name) if text is not None]
    facts = [result_facts(base, text) for base, text in texts]
    for fact in facts:
        _check_sources(part, fact)
    if places.staging is not None:
        if tree is None:
            raise MigrateError(f"{places.staging}: the staging tree of the plan is gone; run `plan` again")
        place, outputs, ours = _complete_staged(plan, key, part, places, tree, facts)
    else:
        cold = cold_place(places, create=True)
        assert cold is not None
        place, outputs, ours = cold, _output_names(facts), frozenset()
    try:
        built = build(places, place, outputs, lambda n: n in ours)
        text = record_text(
            plan.plan_id,
            name,
            method,
            built.original,
            built.new,
            list(built.linked),
            texts,
        )
        faults.point("before:swap-record")
        write_record_in(place, places.work_name, text)
        faults.point("after:swap-record")
    except BaseException:
        _close(place)
        raise
    return _Prepared(name, places, PartitionExchange(method, built.original, built.new), place)


def _output_names(facts: list[ResultFacts]) -> frozenset[str]:
    return frozenset(name for fact in facts for name in fact.output_names())


def _check_sources(part: PartitionPlan, fact: ResultFacts) -> None:
    """The live files a conversion replaces must be as it saw them: a file changed since (a broker ran) fails the
    partition before anything moves."""
    prefix = os.path.join(part.dir, "")
    for kind, seen in fact.live_before:
        path = f"{prefix}{segment_name(fact.base_offset, kind)}"
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            raise SourceChangedError(f"{path} is gone since it was converted", path=path) from None
        now = FileStat.of(st)
        ctime = fact.source_ctime_ns
        if now != seen or (kind is FileKind.LOG and ctime and st.st_ctime_ns != ctime):
            raise SourceChangedError(
                f"{path} changed after it was converted: inode {now.inode}, {now.size} bytes, mtime_ns "
                f"{now.mtime_ns}, ctime_ns {st.st_ctime_ns}; converted from inode {seen.inode}, {seen.size} bytes, "
                f"mtime_ns {seen.mtime_ns}",
                path=path,
                hint="Nothing was changed. A broker may have run on this log dir: `execute` again converts it anew.",
            )


def _complete_staged(
    plan: Plan,
    key: str,
    part: PartitionPlan,
    places: PartitionPlaces,
    tree: StagingTree,
    facts: list[ResultFacts],
) -> tuple[Place, frozenset[str], frozenset[str]]:
    """A cut-over's partition: its staging dir made to hold exactly the staged segments taken and the window's
    outputs. Where that cannot be (a file no record names is in the way, or an earlier attempt chose so), the cold
    place instead: the taken staged files moved there beside the window's outputs (a rename each)."""
    staging_prefix = os.path.join(places.staging or "", "")
    taken = {f.base_offset for f in facts if (f.outputs.log or "").startswith(staging_prefix)}
    taken_names = _output_names([f for f in facts if f.base_offset in taken])
    delta = _output_names([f for f in facts if f.base_offset not in taken])
    window = cold_place(places, create=True)
    assert window is not None
    try:
        window_dir = os.open(window.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=window.parent)
        try:
            present = set(os.listdir(window_dir))
            if not taken_names & present:
                try:
                    staging, _left = complete_staged_dir(tree, part.name, taken, window_dir, sorted(delta & present))
                except FileExistsError:
                    pass
                else:
                    staging.close()  # checked again at every move: the place names it by the tree's descriptor
                    window.close()
                    ours = frozenset(segment_name(b, PRESTAGE_RECORD_SUFFIX) for b in taken)
                    return Place(tree.fd, part.name, places.staging or ""), taken_names | delta, ours
            found = tree.partition(part.name)
            if found is None:
                raise MigrateError(f"{places.staging}: the partition's staging dir is gone since the plan")
            with found as staging:
                for name in sorted(taken_names - present):
                    rename_noreplace(staging.fd, name, window_dir, name)
        finally:
            os.close(window_dir)
    except BaseException:
        window.close()
        raise
    return window, taken_names | delta, frozenset()


def _mixed(plan: Plan, key: str, store: StateStore) -> list[str]:
    """Partitions whose swap or rollback the stage left unfinished: the fence stays up for them. A partition left
    swapping with nothing moved yet (a stop before its first move) is ready again instead: wholly original at its
    path, nothing keeps a broker out of it, and the next execute prepares it again."""
    out = []
    unmoved = []
    for name, (state, exchange) in store.exchanges().items():
        if state in (PartitionState.SWAPPING, PartitionState.ROLLING_BACK):
            where = standing(places_of(plan, key, name), exchange.original, exchange.new)
            if state == PartitionState.SWAPPING and where in (Standing.ORIGINAL, Standing.BUILT):
                unmoved.append(name)
            else:  # moved, but not recorded migrated (its moves may not be durable): finished by the next execute
                out.append(name)
    if unmoved:
        store.set_partitions(unmoved, PartitionState.READY, EventKind.STATE_CORRECTED)
    return out
