"""Where a partition stands, and the one way it changes directory: the room that owns a partition's truth.

A partition is swapped whole. Its new directory is built complete beside the live one (the converted segments and
their indexes, and hard links to every file that does not change), its record written into it, and then it is
exchanged with the live directory in one atomic step; the original, exchanged out, is kept inside the new one until
finalize. ``places`` names the directories, ``record`` is the one grammar of what a swap did (one writer, one reader),
``standing`` says from the directories alone where a partition stands, ``moves`` takes it forward or back from any
standing, and ``reconcile`` holds the state database to the files, as Kafka's ``LogLoader`` owns recovery.
"""
