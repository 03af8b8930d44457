"""Consume every given partition from its beginning with aiokafka (manual assignment, no group), as
``driver_common`` says. A partition is done once the consumer's position is at its end."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from driver_common import Run


async def consume(argv: list[str]) -> None:
    run = Run(argv)
    import aiokafka
    from aiokafka import AIOKafkaConsumer, TopicPartition

    run.emit({"client": f"aiokafka {aiokafka.__version__}"})
    consumer = AIOKafkaConsumer(bootstrap_servers=run.bootstrap, enable_auto_commit=False, group_id=None)
    await consumer.start()
    ends = {TopicPartition(t, p): e for t, p, e in run.wanted}
    consumer.assign(list(ends))
    await consumer.seek_to_beginning(*ends)
    run.progressed()  # the clock of progress starts once the client is set up
    positions: dict[Any, int] = {}
    reason = "deadline"
    try:
        while not run.expired():
            try:
                batches = await consumer.getmany(timeout_ms=200)
            except Exception as exc:  # whatever the client raises is its verdict on the data: record it, go on
                run.error(f"{type(exc).__name__}: {exc}")
                await asyncio.sleep(0.1)  # the same error again at once would only fill the output
                batches = {}
            for tp, records in batches.items():
                for r in records:
                    run.record(tp.topic, tp.partition, r.offset, r.key, r.value, r.headers, r.timestamp)
            now = {tp: await consumer.position(tp) for tp in ends}
            if now != positions:
                positions = now
                run.progressed()
            behind = [f"{t.topic}-{t.partition} at {positions[t]} of {e}" for t, e in ends.items() if positions[t] < e]
            if not behind:
                reason = "every partition read to its end"
                break
            if run.idle():
                reason = f"no progress for {run.idle_ms} ms: {', '.join(behind)}"
                break
        run.emit({"end": reason})
    finally:
        await consumer.stop()


if __name__ == "__main__":
    asyncio.run(consume(sys.argv[1:]))
