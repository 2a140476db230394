"""``onlstm bench``: measurements that prove a device path in one command (``onlstm bench gpu``).

It sits above the experiments, like :mod:`onlstm.cli`: it drives their commands (``lm train``, ``logic train``,
``syneval``) to time them, and imports them only when it runs them.
"""
