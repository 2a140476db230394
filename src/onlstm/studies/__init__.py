"""What the studies (``lm compare``, ``logic compare``) share: grids of runs trained N at a time, each a process of
its own (``parallel``), and their one verdict rule (``stats``)."""
