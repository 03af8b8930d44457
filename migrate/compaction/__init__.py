"""Compaction during migration (KIP-280 strategies, KIP-87 deletes): rules, the facts read from segments, pass one
(the survivors), and the deliberately simple reference that verification trusts. Computation only: no state."""
