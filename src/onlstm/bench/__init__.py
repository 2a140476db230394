"""``onlstm bench``: measurements that prove a device path in one command (``onlstm bench gpu``; docs/cli.md).

It sits above the experiments, like :mod:`onlstm.cli`: it runs their commands, importing them only then."""
