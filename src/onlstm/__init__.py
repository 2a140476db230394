"""onlstm: Ordered Neurons LSTM (Shen et al., ICLR 2019) as a tested, fast PyTorch layer and experiments."""

# Nothing is imported here (not even typing): ``import onlstm`` must be instant, so that the ``onlstm`` command
# answers Ctrl-C (one line, exit 130) before torch's long import begins (onlstm.entry). The layer's names are
# imported on first use (PEP 562).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from .nn import ONLSTM, Distances, ONLSTMCell, cumax

__version__ = "0.1.0"
__all__ = ["ONLSTM", "Distances", "ONLSTMCell", "__version__", "cumax"]
_LAYER = ("ONLSTM", "Distances", "ONLSTMCell", "cumax")


def __getattr__(name: str) -> object:
    import importlib

    if name in _LAYER:
        return getattr(importlib.import_module(".nn", __name__), name)
    try:  # a submodule not imported yet (`import onlstm; onlstm.nn.cumax`, as before the layer was lazy)
        return importlib.import_module(f".{name}", __name__)
    except ModuleNotFoundError as exc:
        if exc.name != f"{__name__}.{name}":
            raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
