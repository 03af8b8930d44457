"""The operator's own gate (``--gate-command``), and the wait for gates to open.

Cruise Control, Strimzi or a site's own checks know things the Admin API does not (an anomaly being fixed, a
maintenance freeze): ``--gate-command CMD`` runs CMD through the shell before each broker, ``{broker}`` replaced by
its id (also in ``KAFKA_LOG_MIGRATE_BROKER``); exit 0 is go, anything else (a timeout too) no go, and what it printed
is shown either way.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from migrate.rolling.gate import GateReason, GateVerdict, ReasonKind

OUTPUT_LIMIT = 16_000  # characters of a command's output kept (its end: where reasons usually are)


class Gate(Protocol):
    source: str

    def check(self, broker: int) -> GateVerdict: ...

    def check_formats(self) -> GateVerdict | None:
        """Whether every broker writes v2 and will keep doing so; None where this gate cannot tell."""
        ...


def for_broker(command: str, broker: int) -> str:
    """``command`` with ``{broker}`` replaced (other braces, as in systemd's ``kafka@{broker}``, stay as written)."""
    return command.replace("{broker}", str(broker))


def run_operator_command(command: str, broker: int, timeout_s: float) -> tuple[int | None, str]:
    """Exit code (None: timed out, its process group killed) and output (stdout then stderr) of ``command`` for
    ``broker``."""
    env = {**os.environ, "KAFKA_LOG_MIGRATE_BROKER": str(broker)}
    proc = subprocess.Popen(
        for_broker(command, broker),
        shell=True,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        encoding="utf-8",
        errors="replace",  # an operator's command may print any bytes: shown with replacement characters
        start_new_session=True,  # its own process group: a timeout kills the shell and what it started
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return None, (out + err)[-OUTPUT_LIMIT:]
    return proc.returncode, (out + err)[-OUTPUT_LIMIT:]


class CommandGate:
    def __init__(self, command: str, timeout_s: float = 60.0) -> None:
        self.command = command
        self.timeout_s = timeout_s
        self.source = f"command: {command}"

    def check_formats(self) -> GateVerdict | None:
        return None  # an operator's command answers for one broker's stop only

    def check(self, broker: int) -> GateVerdict:
        code, out = run_operator_command(self.command, broker, self.timeout_s)
        if code == 0:
            return GateVerdict(broker, True, self.source, (), out)
        shown = for_broker(self.command, broker)
        if code is None:
            why = f"the gate command `{shown}` did not finish within {self.timeout_s:g} s (killed): no answer is no go"
        else:
            why = f"the gate command `{shown}` exited {code}: no go (its output is below)"
        return GateVerdict(broker, False, self.source, (GateReason(ReasonKind.COMMAND_SAID_NO, why),), out)


def wait_for_go(
    gates: Sequence[Gate],
    broker: int,
    timeout_s: float,
    interval_s: float,
    on_verdict: Callable[[GateVerdict], None] = lambda v: None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> list[GateVerdict]:
    """Ask every gate until all say go or ``timeout_s`` has passed; the last verdicts (all go, or why not)."""
    deadline = clock() + timeout_s
    while True:
        verdicts = [g.check(broker) for g in gates]
        for v in verdicts:
            on_verdict(v)
        if all(v.go for v in verdicts) or clock() + interval_s > deadline:
            return verdicts
        sleep(interval_s)
