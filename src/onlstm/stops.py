"""The signals that stop a command (Ctrl-C, SIGTERM, SIGHUP), and stop requests held back while a process imports
torch: a KeyboardInterrupt raised inside torch's C++ start-up is no exception there. For the trainers' stop requests
(onlstm.device), the ``onlstm`` command's start-up (onlstm.entry) and a comparison's run processes
(onlstm.studies.parallel), before either imports anything else: this module imports only the C signal module."""

import _signal as signal  # the C module: the signal module imports enum, which takes milliseconds


def end_signals() -> list[int]:
    """The signals besides Ctrl-C that end a command as it does: SIGTERM, and SIGHUP (a closed terminal) unless
    ignored from the start (``nohup``: asked to outlive the terminal)."""
    hup = getattr(signal, "SIGHUP", None)
    return [signal.SIGTERM] + ([] if hup is None or signal.getsignal(hup) == signal.SIG_IGN else [hup])


def stop_signals() -> list[int]:
    """The signals that interrupt a command as Ctrl-C does (exit 130): Ctrl-C's SIGINT and :func:`end_signals`."""
    return [signal.SIGINT, *end_signals()]


class held_signals:  # lower case: used as a function, ``with held_signals():``
    """Ctrl-C and the signals that end a command (:func:`end_signals`) held back while a block runs, then acted on: the
    block's end raises KeyboardInterrupt if one came. For imports of torch: a KeyboardInterrupt raised inside its
    C++ start-up is no exception there but std::terminate (exit 134), or an import failed with a traceback. A class,
    not contextlib: nothing heavier than ``_signal`` may be imported before the handlers (onlstm.entry and
    onlstm.studies.parallel's run processes use it before they import anything else)."""

    def __enter__(self) -> "held_signals":
        self.held: list[int] = []
        self._signums = stop_signals()
        self._before = [signal.signal(signum, self._hold) for signum in self._signums]
        return self

    def _hold(self, signum, frame) -> None:
        self.held.append(signum)

    def __exit__(self, kind, value, tb) -> None:
        for signum, old in zip(self._signums, self._before):
            signal.signal(signum, old)
        if self.held and kind is None:
            raise KeyboardInterrupt
