"""Planning: the log dirs looked at, what is unsafe refused through one table of checks (``checks``), and a
frozen, content-hashed plan written for review (``plan``); a cluster plan made from every broker's survey."""
