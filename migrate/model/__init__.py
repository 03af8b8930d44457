"""The vocabulary of kafka-log-migrate: the plan, the options, the run's states and events, a task and its outcome.

Every layer imports these records; no layer hands another a dict to navigate by string keys. They are frozen
dataclasses and ``str`` enums, serialised to JSON by one strict codec (``migrate.codec``) that rejects unknown keys,
missing fields and wrong types with the path of the offending value, and that also generates the plan's JSON schema
(``python -m migrate.model > plans/plan.schema.json``; a test checks the file is current).

The plan tree::

    Plan
      options: ConvertOptions                   how every segment is converted (the same on every replica)
      log_dirs: LogDirPlan...                   one broker log dir: its host, broker id, filesystems
        partitions: PartitionPlan...            one topic-partition directory, its leader epoch
          segments: SegmentPlan...              one <base>.log with legacy data: size, mtime, inode, formats
      tasks: TaskPlan...                        groups of segments of one log dir, the unit an engine schedules

``plan_id`` is a hash of the plan's content (everything but the id itself, when and where it was made, and the free
space seen): an edited plan no longer matches its id and is refused; planning the same inputs with the same options
gives the same id, so a re-made plan resumes the state of a crashed run.

The run's state lives per log dir (``migrate.run.state``): a state per segment and per partition, and an event history.
A partition is migrated only when every planned segment of it is live in the new format; a log dir is migrated
only when every planned partition is.
"""
