"""onlstm: Ordered Neurons LSTM (Shen et al., ICLR 2019) as a tested, fast PyTorch layer and experiments."""
from .nn import ONLSTM, ONLSTMCell, Distances, cumax

__version__ = "0.1.0"
__all__ = ["ONLSTM", "ONLSTMCell", "Distances", "cumax", "__version__"]
