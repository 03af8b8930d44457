"""Consume every given partition from its beginning with kafka-python (manual assignment, no group), as
``driver_common`` says. A partition is done once the consumer's position is at its end."""

from __future__ import annotations

import sys
import time
from typing import Any

from driver_common import Run


def main(argv: list[str]) -> int:
    run = Run(argv)
    import kafka
    from kafka import KafkaConsumer, TopicPartition

    run.emit({"client": f"kafka-python {kafka.__version__}"})
    consumer = KafkaConsumer(bootstrap_servers=run.bootstrap, enable_auto_commit=False, group_id=None)
    ends = {TopicPartition(t, p): e for t, p, e in run.wanted}
    consumer.assign(list(ends))
    consumer.seek_to_beginning(*ends)
    run.progressed()  # the clock of progress starts once the client is set up
    positions: dict[Any, int] = {}
    reason = "deadline"
    while not run.expired():
        try:
            batches = consumer.poll(timeout_ms=200)
        except Exception as exc:  # whatever the client raises is its verdict on the data: record it, go on
            run.error(f"{type(exc).__name__}: {exc}")
            time.sleep(0.1)  # the same error again at once would only fill the output
            batches = {}
        for tp, records in batches.items():
            for r in records:
                run.record(tp.topic, tp.partition, r.offset, r.key, r.value, r.headers, r.timestamp)
        now = {tp: consumer.position(tp) for tp in ends}
        if now != positions:
            positions = now
            run.progressed()
        behind = [f"{tp.topic}-{tp.partition} at {positions[tp]} of {e}" for tp, e in ends.items() if positions[tp] < e]
        if not behind:
            reason = "every partition read to its end"
            break
        if run.idle():
            reason = f"no progress for {run.idle_ms} ms: {', '.join(behind)}"
            break
    run.emit({"end": reason})
    consumer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
