"""``python -m migrate.prestage JOB_JSON``: one broker's pre-stage passes in a process of its own (started by
``migrate.prestage.cluster.prestage_broker`` on the broker's worker); prints the broker's summary as JSON."""

from __future__ import annotations

import json
import sys

from migrate.codec import from_json, to_json
from migrate.prestage.cluster import PrestageJob, run_job


def main(argv: list[str]) -> int:
    job = from_json(PrestageJob, json.loads(argv[0]), "the pre-stage job")
    print(json.dumps(to_json(run_job(job))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
