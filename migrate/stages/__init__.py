"""The pipeline's stages as engine-free functions, in the order a run calls them.

    prepare   per log dir   refuse changed inputs, record the plan in the state store, raise the fence
    convert   per task      convert each segment into staging and verify it from disk (migrate.stages.convert);
                            a range task converts and verifies one range of a large segment
    join      per segment   one segment from its ranges, verified, recorded (migrate.stages.join)
    swap      per log dir   re-check the live files, swap every ready partition in, lower the fence
    rollback  per log dir   check every live file first, then put every original back
    finalize  per log dir   delete the originals once the operator is satisfied
    inspect   per log dir   status and verification of the live files, read-only

Each takes the plan (a ``migrate.model.Plan``) and small serializable arguments and returns a small serializable
record, so Dask, Spark or a plain loop can run it. Each runs on the host that owns the log dir, records its own state
(``migrate.run.state``), and is idempotent: running it again after a crash finishes the job instead of redoing or
breaking it. Expected refusals (bad input, a changed file) are outcomes, not exceptions; an exception means the
stage could not run at all (a log dir on another host, a full disk).
"""
