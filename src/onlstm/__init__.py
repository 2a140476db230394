"""onlstm: Ordered Neurons LSTM (Shen et al., ICLR 2019) as a tested, fast PyTorch layer and experiments."""

from .nn import ONLSTM, Distances, ONLSTMCell, cumax

__version__ = "0.1.0"
__all__ = ["ONLSTM", "Distances", "ONLSTMCell", "__version__", "cumax"]
