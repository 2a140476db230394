"""What the studies (``lm compare``, ``logic compare``) share: grids of runs trained N at a time, each a process of
its own (``parallel``), their one verdict rule (``stats``), and the checks of a grid and its folder before any work
(``grid``: each cell and seed named once, an ``--out`` that is the study's own)."""
