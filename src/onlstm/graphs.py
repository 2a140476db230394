"""Recording a training step as a CUDA graph, for every trainer that replays one (``lm/graphs.py``,
``logic/graphs.py``; issue #49): :class:`CudaRecorder` on CUDA, :class:`EagerRecorder` everywhere else (its
"graph" runs the body again, so that the trainers' bookkeeping around their graphs is tested on the CPU)."""

from __future__ import annotations

from collections.abc import Callable

import torch

# Devices where the trainers record their steps (a module constant so that a test can add the CPU, where
# EagerRecorder stands in for CUDA's).
GRAPH_DEVICES = ("cuda",)


class CudaRecorder:
    """Records a body as a CUDA graph; every graph allocates from one memory pool (safe here: a graph's results
    are copied into buffers made outside the pool before it ends, so no graph reads another's memory)."""

    def __init__(self, device: torch.device):
        self.pool = torch.cuda.graph_pool_handle()
        self.stream = torch.cuda.Stream(device)

    def warm(self, body: Callable[[], None]) -> None:
        """Run ``body`` eagerly on the side stream that captures use (a real step)."""
        current = torch.cuda.current_stream(self.stream.device)
        self.stream.wait_stream(current)
        with torch.cuda.stream(self.stream):
            body()
        current.wait_stream(self.stream)

    def record(self, body: Callable[[], None]) -> Callable[[], None]:
        """Capture ``body`` (nothing runs) and return the replay."""
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool, stream=self.stream):
            body()
        return graph.replay


class EagerRecorder:
    """The recorder's contract without CUDA: warming runs the body, a "replay" runs it again."""

    def warm(self, body: Callable[[], None]) -> None:
        body()

    def record(self, body: Callable[[], None]) -> Callable[[], None]:
        return body


def recorder_for(device: torch.device) -> CudaRecorder | EagerRecorder:
    return CudaRecorder(device) if device.type == "cuda" else EagerRecorder()
