"""The oldest torch the layer runs on, checked before anything of the layer is imported (``onlstm/nn/__init__.py``
imports this first): an older torch fails later with an AttributeError deep in an import, which names no fix."""

import torch

#: pyproject.toml's floor says the same (a test holds them equal). 2.7 is the first torch with
#: ``torch.compiler.is_exporting``; 2.4 also read ``torch.library.custom_op``'s string annotations as unknown types.
MIN_TORCH = (2, 7)


def check(version: str = torch.__version__) -> None:
    """Raise ``ImportError`` naming the fix when ``version`` is older than :data:`MIN_TORCH`."""
    if tuple(int(part) for part in version.split(".")[:2]) < MIN_TORCH:
        need = ".".join(map(str, MIN_TORCH))
        raise ImportError(f"onlstm needs torch>={need}, and this is torch {version}: pip install -U 'torch>={need}'")


check()
