"""Consume every given partition from its beginning with confluent-kafka (librdkafka), as ``driver_common`` says.
Manual assignment (librdkafka needs a group id even so; nothing is committed). A partition is done at its
end-of-partition event (``enable.partition.eof``)."""

from __future__ import annotations

import sys
from typing import Any

from driver_common import Run


def main(argv: list[str]) -> int:
    run = Run(argv)
    import confluent_kafka as ck

    raw_version: Any = ck.version()  # a str in 2.16, a (str, int) before
    version = raw_version[0] if isinstance(raw_version, tuple) else raw_version
    run.emit({"client": f"confluent-kafka {version} (librdkafka {ck.libversion()[0]})"})
    consumer = ck.Consumer(
        {
            "bootstrap.servers": run.bootstrap,
            "group.id": run.group,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "error_cb": lambda err: run.error(str(err)),
        }
    )
    consumer.assign([ck.TopicPartition(t, p, ck.OFFSET_BEGINNING) for t, p, _ in run.wanted])
    run.progressed()  # the clock of progress starts once the client is set up
    done = {(t, p) for t, p, e in run.wanted if e == 0}
    reason = "deadline"
    while not run.expired():
        if len(done) == len(run.wanted):
            reason = "every partition read to its end"
            break
        if run.idle():
            behind = [f"{t}-{p}" for t, p, _ in run.wanted if (t, p) not in done]
            reason = f"no progress for {run.idle_ms} ms: {', '.join(behind)} not at their end"
            break
        m = consumer.poll(0.2)
        if m is None:
            continue
        err = m.error()
        if err is not None:
            if err.code() == ck.KafkaError._PARTITION_EOF:
                done.add((str(m.topic()), int(m.partition() or 0)))
                run.progressed()
            else:
                run.error(f"{m.topic()}-{m.partition()} at offset {m.offset()}: {err}")
            continue
        kind, ts = m.timestamp()  # a record without a timestamp (v0) is TIMESTAMP_NOT_AVAILABLE: Kafka's -1
        headers: Any = m.headers() or []
        run.record(
            str(m.topic()),
            int(m.partition() or 0),
            int(m.offset() or 0),
            m.key(),
            m.value(),
            headers,
            None if kind == ck.TIMESTAMP_NOT_AVAILABLE else ts,
        )
    run.emit({"end": reason})
    consumer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
