"""Pre-staging: closed legacy segments of a running broker converted and verified into a sibling tree, so that the
cut-over after a clean stop has only the delta left to convert.

``location`` says where a log dir's staging tree is and refuses places Kafka would trip over; ``identity`` is what
names a file (device, inode, size, mtime, ctime, edge digest); ``record`` is the durable record of one staged
segment and what the cut-over asks of it; ``controls`` the throttle, pause and abort files; ``pagecache`` leaves the
page cache as it was found; ``stage`` converts one segment; ``passes`` walks the log dirs, pass after pass.
"""
