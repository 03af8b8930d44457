"""A read-only endpoint that serves log dirs over the Kafka protocol as a broker's fetch path serves them.

It is equipment, not a broker: no produce, no replication, no transactions, no fetch sessions, no ACLs, no quotas,
and a group coordinator only for groups of one member (``coordinator``). What it does, it does as Kafka does: the
wire formats are written from Kafka's own message schemas (``clients/src/main/resources/common/message/*.json``),
one module per API, each opening with the schema it implements (``api_versions``, ``metadata``, ``list_offsets``,
``fetch``, ``groups``, ``offsets``; their codec ``wire``, the frame and headers ``header``), and a fetch returns a
segment file's bytes unchanged from the entry holding the fetch offset, cut at the fetch's limits, KIP-74's whole
first entry included (``log``). It opens no file for writing.

Its purpose: let real consumers (the Java client, librdkafka, kafka-python, aiokafka, kafkajs, and an operator's own
applications) read a log dir before and after its conversion, with no broker running on it (``kafka-log-migrate
serve``, ``rehearse --clients``, and the tests).
"""
