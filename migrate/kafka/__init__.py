"""What a Kafka broker keeps on disk and how it names it: file and directory names (one ``segment_name``), the
log dir layout as the loader sees it, the ``.lock``, ``meta.properties``/checkpoints/clean-shutdown marker, and the
Java text rules they are parsed by. Read-only facts; nothing here writes."""
