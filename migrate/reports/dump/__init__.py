"""What ``kafka-log-migrate dump`` prints: pure functions from file bytes and decoded entries to output lines.

- ``log_read``: a log segment's bytes into valid runs of entries, invalid entries and how the file ends;
- ``views``: one view per log entry (the one place that tells entry kinds apart) and its records;
- ``log_lines``: those views as ``kafka-dump-log.sh`` text or as the Kafka oracle's JSON lines;
- ``index_files``: ``.index`` and ``.timeindex`` entries, their sanity check and their check against the log.
"""
