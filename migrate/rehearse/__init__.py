"""The canary-broker rehearsal: a copy of one broker's data migrated, proven with independent readers, rolled back and
proven byte for byte; its records, a driver with a step table, fingerprints, the copy, the readers and the cluster
projection."""
