"""A rolling cut-over: brokers stopped, converted and started one at a time while the cluster serves.

gate.py (is it safe to stop this broker: the decision, a pure function of a typed cluster snapshot), kafka_admin.py
(that snapshot, from Kafka's Admin API through aiokafka), operator_gate.py (the operator's own gate command, and the
wait for a gate to open), broker_host.py (what runs on a broker's worker: who it is, has it stopped cleanly),
driver.py (the order of the steps per broker, stopping at the first failure).
"""
