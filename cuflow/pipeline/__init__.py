"""cuflow.pipeline: host frames to pre-processed GPU batches.

* :class:`Bufferizer` collects elements into preallocated (double-buffered)
  device batches and hands a full one to a consumer, ordered by events.
* :class:`Pipeline` uploads host frames on a copy stream, pre-processes them
  with one fused image kernel on a compute stream, and fills a Bufferizer;
  :class:`PipelineOptions` is what each frame becomes, validated once.

This package builds on :mod:`cuflow.core`, :mod:`cuflow.image` and
:mod:`cuflow.memory`; nothing below it imports it.
"""

from ._bufferizer import Bufferizer, BufferizerError, BufferizerHookError, BufferizerStateError
from ._pipeline import Pipeline, PipelineError, PipelineOptions

__all__ = ["Bufferizer", "BufferizerError", "BufferizerHookError", "BufferizerStateError",
           "Pipeline", "PipelineError", "PipelineOptions"]
