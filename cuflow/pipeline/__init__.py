"""Batching and overlapped pipelines: the Bufferizer and Pipeline."""

from ._bufferizer import Bufferizer, BufferizerError
from ._pipeline import Pipeline, PipelineOptions

__all__ = ["Bufferizer", "BufferizerError", "Pipeline", "PipelineOptions"]
