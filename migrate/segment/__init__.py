"""One segment: convert a legacy ``<base>.log`` into a Kafka-ready ``.log``, ``.index`` and ``.timeindex``, and verify.

Engine-free: every function here takes a small serializable task and returns a small serializable result. A segment
too large for one worker is converted in ranges and joined (``ranges``).
"""
