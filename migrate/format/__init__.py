"""Kafka's wire formats as pure code: bytes in, records out; no files, no engines.

- ``legacy``: magic 0 and 1 messages and message sets (compressed wrappers included)
- ``batch``: magic 2 record batches
- ``entries``: a buffer holding any mix of the three, walked entry by entry (the magic byte is at byte 16); every
  entry kind answers for itself, and ``EntryVisitor`` is how a caller does a different thing per kind
- ``codecs``: gzip, snappy (xerial and raw), lz4 (Kafka's magic-0 header quirk included), zstd
- ``records``: the record model shared by all of them, row-wise and columnar
- ``digest``: the format-independent content digest used to prove a conversion kept every record
- ``buffers``: big-endian fields of a whole run of entries at once, and the argument checks both twins make
- ``accel``: the one switch for the optional C accelerator (``_speedups``): ``accel.status()`` says whether it is in
  use and why not; ``KAFKA_LOG_MIGRATE_NO_EXTENSIONS=1`` turns it off. Every accelerated function has a Python
  reference twin with the same results, and each module binds one or the other once, through ``accel.pick``.
"""
