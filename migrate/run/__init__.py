"""A run's own files and their safety: the state database (a record of the files), each partition's swap record
(their truth), swapping a segment's files, the fence, one run at a time, where our files live, and fault points."""
