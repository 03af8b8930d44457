"""Engine options shared by the verbs that run stages, and the engine they choose."""

from __future__ import annotations

import argparse
import contextlib
import urllib.parse
from collections.abc import Callable, Iterator

from migrate.engines import Engine, SerialEngine
from migrate.errors import MigrateError
from migrate.model.plan_tree import Plan
from migrate.planning.plan import load_plan
from migrate.security import TlsFiles, check_scheduler_address
from migrate.watch import progress
from migrate.watch.runlog import note


def add_engine_options(p: argparse.ArgumentParser, full: bool, brokers: bool = True) -> None:
    """``full``: the verbs that convert or re-read data (execute, verify) choose among all engines; the others run
    in this process, or on a Dask scheduler when the plan's log dirs live on other hosts."""
    g = p.add_argument_group("engine")
    if full:
        g.add_argument(
            "--engine",
            choices=["dask", "spark", "serial"],
            default="dask",
            help="where stages run: a Dask cluster (default), Spark through PySpark, or this process",
        )
        g.add_argument(
            "--workers",
            type=int,
            help="LocalCluster worker processes, started at once (default: one per core, started when the plan's "
            "work is worth them: a plan this process finishes in about a second, the time workers take to start, "
            "runs here beside the scheduler and its dashboard)",
        )
        g.add_argument(
            "--dashboard-address",
            default="127.0.0.1:8787",
            help="LocalCluster dashboard address (default 127.0.0.1:8787: loopback only; give :8787 to expose it)",
        )
        g.add_argument(
            "--dashboard",
            action="store_true",
            help="start the LocalCluster and its dashboard whatever the plan's size (by default a plan this process "
            "finishes in about a second runs here and starts none); its address is printed before the first byte is "
            "converted, as it is whenever a dashboard exists",
        )
        g.add_argument("--master", default="local[*]", help="Spark master URL for --engine spark (default local[*])")
    g.add_argument(
        "--scheduler",
        help="address of a running Dask scheduler (default: a LocalCluster)"
        if full
        else "address of a running Dask scheduler whose workers reach the plan's log dirs on other hosts (default: "
        "this process reads them)",
    )
    add_cluster_options(g, brokers)
    if not full:
        p.set_defaults(engine="serial")


def add_cluster_options(g: argparse._ArgumentGroup, brokers: bool = True) -> None:
    g.add_argument(
        "--tls-dir",
        help="a cluster scheduler's TLS files: ca.pem, client.pem and client-key.pem (the README shows how to "
        "make them)",
    )
    g.add_argument(
        "--insecure",
        action="store_true",
        help="allow a scheduler on another host without TLS (anyone who reaches it can run code on the brokers)",
    )
    if brokers:
        g.add_argument(
            "--brokers",
            help="only these brokers of a cluster plan, e.g. 1 (the canary) and later 2,3 (default: every broker)",
        )


def load_plan_for(args: argparse.Namespace) -> Plan:
    """The plan file, restricted to ``--brokers`` where given."""
    plan = load_plan(args.plan)
    if getattr(args, "brokers", None):
        from migrate.planning.cluster import for_brokers

        plan = for_brokers(plan, parse_brokers(args.brokers))
    return plan


def parse_brokers(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(b) for b in text.split(",") if b.strip())
    except ValueError:
        raise MigrateError(f"--brokers {text}: expected broker ids separated by commas, e.g. 1,3") from None


def accelerator_state() -> str:
    try:
        from migrate.format import accel
    except ImportError:  # the switch module is being introduced; an older tree has none
        return "active"
    status = accel.status()
    return "active" if status.active else status.reason


LOCAL_CLUSTER_HOST = "127.0.0.1"  # where a LocalCluster's workers listen, so the only host its tasks can be pinned to


def refuse_unreachable_hosts(plan: Plan) -> None:
    """A LocalCluster runs only on this machine: a plan whose log dirs are pinned to other hosts (a cluster plan, or
    ``plan --host-map``) would wait out Dask's no-workers timeout in every stage and end in NoValidWorkerError."""
    pinned = sorted({d.host for d in plan.log_dirs if d.host not in (None, LOCAL_CLUSTER_HOST)})
    if pinned:
        raise MigrateError(
            f"plan {plan.plan_id} pins its log dirs to {', '.join(pinned)}, and without --scheduler this command "
            "starts a Dask LocalCluster on this machine only, whose workers can never be on those hosts. Give "
            "--scheduler ADDRESS (with --tls-dir) of the Dask cluster that has a worker on each broker host, or run "
            "on the broker with a plan made there (plan --log-dirs ... without --host-map)."
        )


def dashboard_line(link: str, migration_link: str, asked: str | None) -> str:
    """Where the dashboard is; where Dask had to move a LocalCluster's off the port asked for (taken by another
    process), say so on the terminal, not only in the run log: an operator opening the asked port would see someone
    else's page. ``asked``: the --dashboard-address of a LocalCluster; None for a running scheduler's dashboard,
    which listens where its own operator put it."""
    line = f"Dask dashboard: {link} (the migration's own page: {migration_link})"
    wanted = asked.rsplit(":", 1)[-1] if asked else ""
    got = urllib.parse.urlsplit(link).port
    if wanted.isdigit() and int(wanted) != 0 and got is not None and got != int(wanted):
        line += f"; port {wanted} was taken, so the dashboard listens on {got}"
    return line


@contextlib.contextmanager
def engine_for(
    args: argparse.Namespace,
    *,
    engine: str | None = None,
    on_segment: Callable[[progress.Event], None] | None = None,
    plan: Plan | None = None,
    interrupted_close: str = "",
) -> Iterator[Engine]:
    """The verb's engine (``build_engine``) for the ``with`` block, closed however the block ends; an engine's close
    is bounded (a Dask cluster that does not close in time is left to stop at exit: engines/closing.py).
    ``engine``: the engine to run in place of ``--engine`` (the cluster verbs run on Dask). ``interrupted_close``:
    what to say, instead of failing, when Ctrl-C stops a close after the block ended well (its output is out)."""
    if engine is not None:
        args = argparse.Namespace(**{**vars(args), "engine": engine})
    made = build_engine(args, on_segment, plan)
    try:
        yield made
    except BaseException:
        made.close()
        raise
    if not interrupted_close:
        made.close()
        return
    try:
        made.close()
    except KeyboardInterrupt:
        note(interrupted_close)


def make_engine(
    args: argparse.Namespace, on_segment: Callable[[progress.Event], None] | None = None, plan: Plan | None = None
) -> tuple[Engine, str]:
    """The engine, and the C accelerator's state ("active", or why the slower fallback runs): for a caller that
    closes the engine itself (a rehearsal makes it when execute needs it)."""
    accelerator = accelerator_state()
    return build_engine(args, on_segment, plan), accelerator


def build_engine(
    args: argparse.Namespace, on_segment: Callable[[progress.Event], None] | None = None, plan: Plan | None = None
) -> Engine:
    """The engine ``args`` choose. ``on_segment`` is called as each segment finishes, where the engine can tell
    (serial: in this process; Dask: from the workers' events); the caller's progress line replaces the engines' own
    per-task counters. ``plan``: refused at once if the engine could never reach its hosts."""
    engine_name = "dask" if getattr(args, "scheduler", None) and args.engine == "serial" else args.engine
    if plan is not None and engine_name == "dask" and not getattr(args, "scheduler", None):
        refuse_unreachable_hosts(plan)
    if getattr(args, "dashboard", False) and (engine_name != "dask" or getattr(args, "scheduler", None)):
        raise MigrateError(
            "--dashboard starts a Dask LocalCluster's dashboard: it goes with --engine dask and without --scheduler "
            "(a running scheduler has its own dashboard, printed when it answers; Spark prints its UI's address)"
        )
    if engine_name == "serial":
        return SerialEngine(on_segment=on_segment)
    if engine_name == "spark":
        from migrate.engines.spark import SparkEngine

        spark = SparkEngine(master=args.master, progress=False if on_segment is not None else None)
        note(f"Spark UI: {spark.ui_url}")
        return spark
    from migrate.engines.dask import DaskEngine

    security = None
    if args.scheduler:
        tls = TlsFiles.from_dir(args.tls_dir) if getattr(args, "tls_dir", None) else None
        check_scheduler_address(args.scheduler, tls, getattr(args, "insecure", False))
        security = tls.security() if tls else None
    engine = DaskEngine(
        scheduler=args.scheduler,
        security=security,
        n_workers=getattr(args, "workers", None),
        dashboard_address=getattr(args, "dashboard_address", "127.0.0.1:0"),
        progress=False if on_segment is not None else None,
        on_segment=on_segment,
        # printed once the cluster answers, before the first stage that reads or writes segment data
        on_ready=lambda e: note(
            dashboard_line(
                e.dashboard_link,
                e.migration_link,
                None if args.scheduler else getattr(args, "dashboard_address", None),
            )
        ),
        dashboard=getattr(args, "dashboard", False),
    )
    return engine
