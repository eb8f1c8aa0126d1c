"""Host frames -> pre-processed GPU batches, with copies overlapping compute.

:class:`Pipeline` is the inference-input path the rest of cuflow exists for::

    host frame --(host copy)--> pinned staging k --(H2D, copy stream)--> device frame k
        --(one fused kernel, compute stream)--> slot of a double-buffered Bufferizer
        --(take: event)--> batch for the consumer (zero-copy through DLPack)

Frame ``i + 1`` is uploaded while frame ``i`` is being processed, and batch
``j + 1`` is filled while the consumer works on batch ``j``.  Every hand-over
between streams is an event; the host waits only for a staging buffer whose
previous upload has not finished yet (back-pressure) and, with
``frames_reused=True``, for a pinned frame's own upload before it asks for the
next frame; never for the kernels.

Faults: every frame taken from the source is delivered once in a batch, or
counted as not delivered (:attr:`Pipeline.undelivered`) when :meth:`Pipeline.batches`
ends by an exception or is closed early; the next call starts clean.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import types
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy

from .. import image, memory
from .._checks import is_integer
from .._errors import ArgumentError, ArgumentTypeError, CuflowError
from ..core import Device, Event, Stream, as_stream, copy, empty, get_backend, zeros
from ..image._parse import (CHANNELS, INTERP, LAYOUTS, YUV, checked_dtype, choice, finite,
                            is_real, out_dtype, out_map, output_elements, per_channel)
from ._bufferizer import Bufferizer

__all__ = ["Pipeline", "PipelineError", "PipelineOptions"]



class _ConsumerStop(Exception):
    """A consumer's StopIteration on its way through :meth:`Pipeline.batches` (see run)."""

class PipelineError(CuflowError, RuntimeError):
    """A Pipeline cannot do what was asked in its state (an iteration already open)."""


#: most staging slots, and most copy threads, of a Pipeline
MAX_STAGING = 64


@dataclasses.dataclass(frozen=True)
class PipelineOptions:
    """What each frame becomes; validated once, when the :class:`Pipeline` is made.

    Attributes
    ----------
    size : int or (int, int)
        The output's ``(height, width)``; an int for a square.  Height at most 65535.
    batch_size : int
        Frames per batch, at least 1.
    mean, std : float or sequence of float, default 0.0, 1.0
        Per-channel normalization, as :func:`cuflow.image.resize_normalize` takes it;
        sequences (lists, arrays) are kept as tuples of floats.
    scale : float, default 1/255
        Applied to the 0-255 value first.
    src_format, out_format : str, optional
        The frames' channel order or YUV format, and the output's channel order (the image
        functions' parameters).
    layout : {"NCHW", "NHWC"}, default "NCHW"
        The batch's layout.
    dtype : {float32, float16, uint8}, default float32
        The batch's dtype.
    interpolation : {"bilinear", "nearest", "area"}, default "bilinear"
        How frames are resized.
    letterbox : bool, default False
        Keep the aspect ratio and pad with ``pad`` (YOLO-style) with
        :func:`cuflow.image.letterbox`; else the frame is stretched with
        :func:`cuflow.image.resize_normalize`.
    pad : float, default 114
        The letterbox's padding value (0-255, before normalization).
    n_staging : int, default 4
        With ``frames_reused=False``, the frames in flight ahead of the one being
        processed (one otherwise); at least 2, at most :data:`MAX_STAGING`.
    copy_threads : int, default 3
        Host threads that copy pageable frames into pinned memory (``0``: pageable frames
        are uploaded directly, the CUDA driver staging them itself); at most
        :data:`MAX_STAGING`.
    frames_reused : bool, default True
        Whether the producer may write into a frame's memory once the next frame is
        asked for (see the notes).

    Raises
    ------
    ArgumentTypeError, ArgumentError
        A field of the wrong type or out of range.
    ImageFormatError, ImageTypeError
        An image option the kernels refuse (raised here, before a frame is taken).

    Notes
    -----
    The defaults were chosen on 1080p frames with
    ``bench/test_bench_pipeline.py::test_pipeline_fps`` (rerun it with other values
    to compare): fewer threads or slots leave the uploads waiting for host copies,
    and more threads compete with the uploads for host memory bandwidth.

    A pinned frame is uploaded in place.  ``frames_reused=True`` (the safe
    default) is for producers that may write into a frame's memory once the
    next frame is asked for, such as a decoder cycling through its own pinned
    buffers: each pinned frame's upload is waited for before the next frame is
    taken, which leaves the copy engine idle between frames.  Pass ``False`` when the
    frames' memory is not written while the pipeline runs (a list of frames, or a new
    array per frame): uploads then run back to back, the pipeline keeps each frame
    alive until its upload is done, and up to ``n_staging`` pageable frames
    are copied into staging at once, a whole frame per thread.  With
    ``frames_reused=True`` a pageable frame is copied, in row chunks over the
    threads, before the next one is asked for.
    """

    size: tuple[int, int]
    batch_size: int
    mean: Any = 0.0
    std: Any = 1.0
    scale: float = 1 / 255
    src_format: str | None = None
    out_format: str | None = None
    layout: str = "NCHW"
    dtype: Any = numpy.float32
    interpolation: str = "bilinear"
    letterbox: bool = False
    pad: float = 114
    n_staging: int = 4
    copy_threads: int = 3
    frames_reused: bool = True

    def __post_init__(self) -> None:
        size = self.size if isinstance(self.size, tuple | list) else (self.size, self.size)
        if len(size) != 2 or not all(is_integer(v) for v in size):
            raise ArgumentTypeError(f"Pipeline: size must be a positive int or (height, width) "
                                    f"of ints, got {self.size!r}")
        if not all(v > 0 for v in size):
            raise ArgumentError(f"Pipeline: size must be a positive int or (height, width), "
                                f"got {self.size!r}")
        if size[0] > 65535:  # (the kernels' grid: checked here, before a frame is taken)
            raise ArgumentError(f"Pipeline: size's height must be at most 65535, got "
                                f"{self.size!r}")
        object.__setattr__(self, "size", (int(size[0]), int(size[1])))
        for name, lo in (("batch_size", 1), ("n_staging", 2), ("copy_threads", 0)):
            v = getattr(self, name)
            if not is_integer(v):
                raise ArgumentTypeError(f"Pipeline: {name} must be an int >= {lo}, got {v!r}")
            if v < lo:
                raise ArgumentError(f"Pipeline: {name} must be an int >= {lo}, got {v!r}")
        for name in ("n_staging", "copy_threads"):  # (each a pinned slot, or a thread)
            if getattr(self, name) > MAX_STAGING:
                raise ArgumentError(f"Pipeline: {name} must be at most {MAX_STAGING}, got "
                                    f"{getattr(self, name)!r}")
        for name in ("frames_reused", "letterbox"):
            if not isinstance(getattr(self, name), bool):
                raise ArgumentTypeError(f"Pipeline: {name} must be True or False, "
                                        f"got {getattr(self, name)!r}")
        # checked here, once, rather than at the first frame
        norm = image.Norm(self.mean, self.std, self.scale)
        for name in ("mean", "std"):
            if not is_real(getattr(self, name)):
                # a sequence kept as the checked tuple of floats: a list or an array would
                # be converted again for every frame's plan lookup
                object.__setattr__(self, name, getattr(norm, name))
        if not is_real(self.scale):  # (a 0-d array: a float, so the options stay hashable)
            object.__setattr__(self, "scale", float(norm.scale))
        self._check_image_options()

    def _check_image_options(self) -> None:
        """The options passed on to :mod:`cuflow.image`, checked by its own parsers, here
        rather than at the first frame (after it was taken from the source); they raise
        the errors the kernel would, naming it."""
        name = "letterbox" if self.letterbox else "resize_normalize"
        choice(name, "layout", self.layout, LAYOUTS)
        checked_dtype(name, out_dtype(self.dtype, None))
        choice(name, "interpolation", self.interpolation, INTERP)
        if self.letterbox:
            finite(name, "pad", self.pad)
        if self.src_format is not None:
            choice(name, "src_format", self.src_format, set(CHANNELS) | set(YUV))
            # out_map reads only the colours of the source, which src_format fixes (YUV
            # frames are sampled as RGB)
            colors = "RGB" if self.src_format in YUV else CHANNELS[self.src_format]
            n = len(out_map(name, types.SimpleNamespace(colors=colors), self.out_format)[0])
        elif self.out_format is not None:
            n = len(CHANNELS[choice(name, "out_format", self.out_format, set(CHANNELS))])
        else:
            n = 3  # a GRAY frame gives 1 channel, a colour frame 3: 1 or 3 values may fit
        known = self.src_format is not None or self.out_format is not None
        output_elements(name, *self.size, n if known else 1)
        for what in ("mean", "std"):
            per_channel(name, what, getattr(self, what), n)

    def kernel_kwargs(self) -> dict[str, Any]:
        """The keyword arguments these options give the image operator of each batch."""
        kw = dict(interpolation=self.interpolation, mean=self.mean, std=self.std,
                  scale=self.scale, src_format=self.src_format, out_format=self.out_format,
                  layout=self.layout, dtype=self.dtype)
        if self.letterbox:
            kw["pad"] = self.pad
        return kw


def _is_pinned(a: numpy.ndarray) -> bool:
    """Whether ``a``'s memory is page-locked (CUDA host memory): then it is uploaded in place."""
    b = get_backend()
    if not b.is_gpu or not a.flags.c_contiguous:
        return False
    try:
        attrs = b.xp.cuda.runtime.pointerGetAttributes(a.ctypes.data)
    except b.cuda_errors:
        return False
    return int(attrs.type) == 1  # cudaMemoryTypeHost


class _Slot:
    """One frame in flight: pinned staging, its device copy, and the events between them."""

    __slots__ = ("borrowed", "dev", "host", "uploaded", "used")

    def __init__(self) -> None:
        # the caller's pinned frame that the upload reads in place, kept alive until it is done
        self.borrowed: numpy.ndarray | None = None
        self.host: numpy.ndarray | None = None
        self.dev: Any = None
        self.uploaded: Event | None = None  # H2D done (copy stream)
        self.used: Event | None = None      # the kernel reading dev is done (compute stream)


class Pipeline:
    """Pre-process host frames into batches on the GPU, overlapping uploads with compute.

    Parameters
    ----------
    size : int or (int, int)
        Output ``(height, width)`` of each frame.
    batch_size : int
        Frames per batch.
    **options
        See :class:`PipelineOptions` (``mean``, ``std``, ``scale``,
        ``src_format``, ``out_format``, ``layout``, ``dtype``,
        ``interpolation``, ``letterbox``, ``pad``, ``n_staging``,
        ``copy_threads``, ``frames_reused``).

    Notes
    -----
    Stream semantics: uploads run on :attr:`copy_stream`, kernels on
    :attr:`compute_stream`; a yielded batch is ordered before work queued on
    the consumer's stream (``stream=`` of :meth:`batches`, default: the
    current stream) by an event, and before any DLPack consumer
    (``torch.from_dlpack``).  A batch stays valid until the next one is asked
    for: its memory is refilled only after the work queued on the consumer's
    stream by then.

    Examples
    --------
    >>> pipe = cuflow.Pipeline((640, 640), 16, mean=(0.485, 0.456, 0.406),
    ...                        std=(0.229, 0.224, 0.225))                 # doctest: +SKIP
    >>> for batch in pipe.batches(decoder):                               # doctest: +SKIP
    ...     logits = model(torch.from_dlpack(batch))

    Warnings
    --------
    Bad options raise :class:`cuflow.ArgumentError` / :class:`cuflow.ArgumentTypeError`
    when the Pipeline is made; those passed on to :mod:`cuflow.image` (``mean``,
    ``std``, ``scale``, ``src_format``, ``out_format``, ``layout``, ``dtype``,
    ``interpolation``, ``pad``) raise its
    :class:`~cuflow.image.ImageFormatError` / :class:`~cuflow.image.ImageTypeError`
    then too.  A bad frame raises the same errors, naming its shape, whatever
    ``copy_threads`` is.  An error during :meth:`batches` (a bad frame,
    :class:`cuflow.OutOfMemoryError`, a failing kernel, an exception or
    ``KeyboardInterrupt`` thrown in by the consumer, the source raising)
    propagates as it is, with a note counting the frames delivered and not
    delivered where some were not.  Batches yielded before it were delivered whole; the frames
    taken from the source after the last of them were not, and
    :attr:`undelivered` gives their positions in the source.  The Pipeline
    is then ready for the next :meth:`batches` call, which starts with an
    empty batch.
    """

    def __init__(self, size: Any, batch_size: int, **options: Any) -> None:
        known = {f.name for f in dataclasses.fields(PipelineOptions)} - {"size", "batch_size"}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ArgumentTypeError(f"cuflow.Pipeline: unknown option(s) {', '.join(unknown)}; "
                                    f"the options are {', '.join(sorted(known))}")
        self.options = PipelineOptions(size=size, batch_size=batch_size, **options)
        self.device = get_backend().current_device()  #: where its streams and buffers live
        self.copy_stream = Stream(non_blocking=True)
        self.compute_stream = Stream(non_blocking=True)
        # with frames not reused, n_staging frames are taken ahead of the one being processed,
        # each uploading (or being copied into staging) into a device frame of its own
        extra = 0 if self.options.frames_reused else 1
        self._slots = [_Slot() for _ in range(self.options.n_staging + extra)]
        self._buffer: Bufferizer | None = None
        self._guard = threading.Lock()
        self._layout: tuple = ()  # the frames' channel layout the Bufferizer's elements are of
        self._first_shape: tuple = ()  # (a frame of that layout, for messages)
        #: With ``letterbox=True``: the :class:`cuflow.image.Letterbox` of the last frame
        #: (``unmap_boxes`` maps detections back to frame pixels).
        self.letterbox_info: image.Letterbox | None = None
        self.frames = 0  # frames processed so far
        #: Frames taken from the source by the last :meth:`batches` call, and those of them
        #: delivered in batches (always the first ones, in order).
        self.frames_in = 0
        self.frames_out = 0
        self._open = False  # a batches() iteration is running
        self._pool: Any = None  # threads of the staging copy, made on first use
        self._copying: list[Any] = []  # the host copy in flight (futures of its chunks)

    # ----------------------------------------------------------------- stages
    def _upload(self, k: int, frame: numpy.ndarray) -> Callable[[], Any]:
        """Frame -> (pinned staging k ->) device frame k on the copy stream.

        Returns ``finish()``, which gives device frame k once its upload is
        queued.  A pageable frame is copied into pinned staging by the copy
        threads meanwhile, so the caller's work between the two calls (the
        previous frame's kernel, handing a batch to the consumer) overlaps that
        host copy; ``finish`` waits for it, then queues the upload.
        """
        s = self._slots[k]
        if s.uploaded is not None:
            s.uploaded.synchronize()  # back-pressure: staging k's last upload must be done
        s.borrowed = None
        if s.dev is None or s.dev.shape != frame.shape:
            s.host = None
            if s.used is not None:
                # the old device frame goes back to the pool on the copy stream: after the
                # kernel still reading it
                self.copy_stream.wait(s.used)
            s.dev = None
            s.dev = empty(frame.shape, dtype=frame.dtype, stream=self.copy_stream)
        pinned = _is_pinned(frame)
        if pinned or self.options.copy_threads == 0:  # 0: the driver stages pageable frames
            self._send(s, frame)
            # A pinned frame is read in place until its upload is done: held until then,
            # and with frames_reused, waited for before the next frame is asked for.
            s.borrowed = frame if pinned else None
            return lambda: s.dev
        if s.host is None:
            s.host = memory.empty_pinned(frame.shape, frame.dtype)
        copying = self._host_copy(s.host, frame)
        self._copying.extend(copying)

        def finish() -> Any:
            for f in copying:
                f.result()
            self._send(s, s.host)
            return s.dev

        return finish

    def _send(self, s: _Slot, host: numpy.ndarray) -> None:
        if s.used is not None:
            self.copy_stream.wait(s.used)  # the kernel still reading dev k goes first
        copy(host, dst=s.dev, stream=self.copy_stream)
        s.uploaded = self.copy_stream.record(s.uploaded or Event(timing=False))

    def _host_copy(self, dst: numpy.ndarray, src: numpy.ndarray) -> list[Any]:
        """Start copying a pageable frame into pinned staging on the copy threads (NumPy
        drops the GIL to copy); the futures of the copy.

        With ``frames_reused`` only one frame is copied at a time, split in row
        chunks over the threads; otherwise each frame is one task and several
        frames are copied at once (a host copy by one thread takes several times
        as long as the frame's pinned upload, so several must run to keep the
        copy engine busy).
        """
        n = self.options.copy_threads
        if self._pool is None:
            self._pool = ThreadPoolExecutor(n, thread_name_prefix="cuflow-staging")
        if not self.options.frames_reused:
            return [self._pool.submit(numpy.copyto, dst, src)]
        # at least a row per chunk: a frame of no rows copies nothing, and the kernel then
        # refuses it as it does when the driver stages the frame (copy_threads=0)
        step = max(1, -(-src.shape[0] // n))
        return [self._pool.submit(numpy.copyto, dst[i:i + step], src[i:i + step])
                for i in range(0, src.shape[0], step)]

    def _process(self, k: int, dev: Any, buf: Bufferizer) -> None:
        """Device frame k -> the next batch slot, one fused kernel on the compute stream."""
        s = self._slots[k]
        self.compute_stream.wait(s.uploaded)
        self._preprocess(dev, buf.next_slot(stream=self.compute_stream))
        buf.commit(stream=self.compute_stream)
        s.used = self.compute_stream.record(s.used or Event(timing=False))

    def _bufferizer(self, frame_shape: tuple[int, ...]) -> Bufferizer:
        layout = (len(frame_shape), *frame_shape[2:])  # (packed or YUV, channels)
        if self._buffer is not None and layout != self._layout:
            if self.frames_in > 1:  # (a batch holds elements of one shape)
                raise image.ImageFormatError(
                    f"cuflow.Pipeline: frame {self.frames_in - 1} has shape {frame_shape}, "
                    f"whose channels differ from those of this run's first frame, of shape "
                    f"{self._first_shape}: the frames of one batches() call share their "
                    "channel layout")
            self._buffer = None  # a new run of another layout: elements of another shape
        if self._buffer is None:
            # The element shape and dtype are the kernel's: ask it, on a frame of the first
            # frame's shape, so that the kernel refuses a bad frame before its upload, naming
            # its shape (on the compute stream, where the probe's memory goes back to the
            # pool; the probe builds the plan the frames reuse).
            o = self.options
            probe = self._preprocess(zeros(frame_shape, dtype=numpy.uint8,
                                           stream=self.compute_stream), None)
            self._buffer = Bufferizer(probe.shape, o.batch_size, probe.dtype,
                                      stream=self.compute_stream, n_buffers=2)
            self._layout, self._first_shape = layout, tuple(frame_shape)
        return self._buffer

    def _preprocess(self, src: Any, dst: Any) -> Any:
        o = self.options
        if o.letterbox:
            out, self.letterbox_info = image.letterbox(src, o.size, dst=dst,
                                                       stream=self.compute_stream,
                                                       **o.kernel_kwargs())
            return out
        return image.resize_normalize(src, o.size, dst=dst, stream=self.compute_stream,
                                      **o.kernel_kwargs())

    # --------------------------------------------------------------- drivers
    @property
    def undelivered(self) -> range:
        """Positions in the source of the frames the last :meth:`batches` call took but did
        not deliver (empty after a complete run)."""
        return range(self.frames_out, self.frames_in)

    def batches(self, frames: Iterable[numpy.ndarray], *,
                stream: Any = None) -> Generator[Any, None, None]:
        """Yield the model's batches of ``frames``, ``batch_size`` frames each but maybe the last.

        The work runs on the Pipeline's device (the one current when it was made), whichever
        device is current when the batches are asked for.  One iteration runs at a time per
        Pipeline (:class:`PipelineError` otherwise).  When it ends by an exception, or the
        consumer stops early, the frames not delivered are counted in :attr:`undelivered`
        (see "Warnings" in the class docstring).

        Parameters
        ----------
        frames : iterable of numpy.ndarray
            ``(H, W, C)`` uint8 frames (or ``(H*3//2, W)`` NV12 / I420 with
            ``src_format``), for example from a video decoder.
        stream : cuflow.Stream, optional
            The consumer's stream, which each batch is ordered before; the current stream
            when omitted.

        Yields
        ------
        darray
            ``(n, C, H, W)`` with ``layout="NCHW"`` (the default), ``(n, H, W, C)`` with
            ``"NHWC"``, of the options' ``dtype``; valid until the next batch is asked for.

        Notes
        -----
        Stream semantics: asynchronous; uploads and kernels run on the Pipeline's streams,
        and an event orders each batch before the work queued on ``stream`` (see the class
        docstring).
        """
        # the arguments are checked here, at the call, not at the first batch asked for (the
        # current stream, None, is resolved there, on the Pipeline's device)
        if not hasattr(frames, "__iter__") or getattr(frames, "ndim", None) == 0:
            raise ArgumentTypeError(f"cuflow.Pipeline.batches: frames must be an iterable of "
                                    f"uint8 frames, got {type(frames).__name__}")
        if stream is not None:
            as_stream(stream, "Pipeline.batches")
        gen = self._iterate(frames, stream)
        return _on_device(self.device, gen) if get_backend().multi else gen

    def _iterate(self, frames: Iterable[numpy.ndarray],
                 stream: Any) -> Generator[Any, None, None]:
        consumer = as_stream(stream, "Pipeline.batches")
        with self._guard:  # (two threads starting an iteration at once: one of them opens it)
            if self._open:
                raise PipelineError("Pipeline.batches: another iteration of this Pipeline is "
                                    "still open; finish or close() that generator first")
            self._open = True
        self.frames_in = self.frames_out = 0
        if self._buffer is not None:
            self._recover(consumer)
        try:
            yield from self._batches(frames, consumer)
        except BaseException as e:
            if not isinstance(e, GeneratorExit) and self.frames_in != self.frames_out:
                e.add_note(f"cuflow.Pipeline: {self.frames_out} frame(s) delivered, "
                           f"{self.frames_in - self.frames_out} taken from the source and not "
                           f"delivered (Pipeline.undelivered: source positions "
                           f"{self.frames_out}..{self.frames_in - 1})")
            raise
        finally:
            try:
                if self._buffer is not None:
                    self._recover(consumer)
            finally:
                # closed only once recovered: an iteration opened in between (another
                # thread) would have its batch released and its partial batch dropped
                with self._guard:
                    self._open = False

    def _recover(self, consumer: Any) -> None:
        """Leave the Bufferizer ready for a new run: a taken batch released (to the
        consumer's stream) and the partial batch, whose frames were not delivered, dropped."""
        buf = self._buffer
        while True:
            try:
                buf.release(stream=consumer)
            except BufferError:
                break
        buf.reset()

    def _batches(self, frames: Iterable[numpy.ndarray], consumer: Any) -> Iterator[Any]:
        reused = self.options.frames_reused
        # frames taken but not processed yet: one (its host copy overlapping the previous
        # frame's kernel), or with frames that are not reused, n_staging (their host copies
        # running at once, or their uploads queued back to back: bench/test_bench_pipeline.py
        # ::test_pipeline_fps, pinned frames); with the frame being processed, no more than
        # the device frames
        ahead = 1 if reused else len(self._slots) - 1
        staged: collections.deque[tuple[int, Callable[[], Any]]] = collections.deque()
        buf: Bufferizer | None = None
        pending: tuple[int, Any] | None = None  # uploaded (or uploading), not yet processed
        k = 0
        try:
            for frame in frames:
                self.frames_in += 1
                frame = self._check_frame(frame)
                buf = self._bufferizer(frame.shape)
                # Frame i+1's host copy runs and its upload is queued while frame i's
                # kernel is queued (and the consumer works on a full batch).
                staged.append((k, self._upload(k, frame)))
                k = (k + 1) % len(self._slots)
                if len(staged) == ahead:
                    pending = yield from self._advance(pending, staged, buf, consumer)
                    j = pending[0]
                    if reused and self._slots[j].borrowed is not None:
                        self._slots[j].uploaded.synchronize()  # before the caller refills it
            while staged:
                pending = yield from self._advance(pending, staged, buf, consumer)
            if pending is not None:
                yield from self._step(pending, buf, consumer)
            if buf is not None and len(buf):
                yield from self._deliver(buf, consumer)
        finally:  # a consumer that stops early: no copy into staging may outlive the loop
            for f in self._copying:
                f.result()
            self._copying = []

    def _advance(self, pending: tuple[int, Any] | None, staged: Any, buf: Bufferizer,
                 consumer: Any) -> Generator[Any, None, tuple[int, Any]]:
        """Process the pending frame, then queue the upload of the oldest staged one."""
        j, finish = staged.popleft()
        if pending is not None:
            yield from self._step(pending, buf, consumer)
        dev = finish()
        self._copying = [f for f in self._copying if not f.done()]
        return j, dev

    def _step(self, pending: tuple[int, Any], buf: Bufferizer, consumer: Any) -> Iterator[Any]:
        self._process(*pending, buf)
        self.frames += 1
        if buf.full:
            yield from self._deliver(buf, consumer)

    def _deliver(self, buf: Bufferizer, consumer: Any) -> Iterator[Any]:
        batch = buf.take(stream=consumer)
        self.frames_out += len(batch)  # handed over at the yield, even if the consumer raises
        yield batch
        buf.release(stream=consumer)  # the consumer's work on it is queued by now

    def run(self, frames: Iterable[numpy.ndarray], consumer: Callable[[Any], Any], *,
            stream: Any = None) -> list[Any]:
        """Call ``consumer(batch)`` for every batch of :meth:`batches`.

        An exception raised by ``consumer`` ends the iteration as one thrown into
        :meth:`batches` does: the iteration is closed, the exception gets the note counting
        the frames delivered and not delivered (:attr:`undelivered`), and is re-raised; the
        next call starts clean.

        Parameters
        ----------
        frames : iterable of numpy.ndarray
            The frames, as :meth:`batches` takes them.
        consumer : callable
            Called with each batch, on the host, in order.
        stream : cuflow.Stream, optional
            The consumer's stream (see :meth:`batches`).

        Returns
        -------
        list
            What ``consumer`` returned for each batch.

        Notes
        -----
        Stream semantics: as :meth:`batches`; ``consumer`` queues its work on ``stream``.
        """
        if not callable(consumer):  # (before a frame is taken from the source)
            raise ArgumentTypeError(f"cuflow.Pipeline.run: consumer must be callable, got "
                                    f"{type(consumer).__name__} {consumer!r:.60}")
        gen = self.batches(frames, stream=stream)
        results = []
        try:
            for batch in gen:
                try:
                    results.append(consumer(batch))
                except BaseException as e:
                    # at the batch's yield, where batches() counts the frames, adds its note
                    # and closes; it raises e again
                    if not isinstance(e, StopIteration):
                        gen.throw(e)
                        raise
                    # (a StopIteration raised in a generator becomes a RuntimeError: a
                    # carrier goes in, and its note comes out on the consumer's exception)
                    carrier = _ConsumerStop()
                    try:
                        gen.throw(carrier)
                    except _ConsumerStop:
                        for note in getattr(carrier, "__notes__", ()):
                            e.add_note(note)
                    raise
        finally:
            gen.close()  # also if the exception escapes throw() another way
        return results

    def _check_frame(self, frame: Any) -> numpy.ndarray:
        if not isinstance(frame, numpy.ndarray) or frame.dtype != numpy.uint8:
            raise ArgumentTypeError(
                "Pipeline: frames must be uint8 numpy.ndarray (H, W, C) or (H*3//2, W), got "
                f"{type(frame).__module__}.{type(frame).__name__}"
                f"{' of ' + str(frame.dtype) if hasattr(frame, 'dtype') else ''}")
        fmt = self.options.src_format
        if fmt in YUV and frame.ndim != 2:  # (the kernel would take a 3-D one as a batch)
            raise ArgumentError(f"Pipeline: with src_format={fmt!r} a frame is (H*3//2, W), "
                                f"one frame per item, got shape {frame.shape}")
        if frame.ndim not in (2, 3):
            raise ArgumentError(f"Pipeline: a frame is (H, W, C) or (H*3//2, W), got shape "
                                f"{frame.shape}")
        return frame

    def close(self) -> None:
        """Stop the staging-copy threads (the Pipeline can still be used; they restart)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def synchronize(self) -> None:
        """Wait for every upload and kernel queued so far."""
        self.copy_stream.synchronize()
        self.compute_stream.synchronize()


def _on_device(device: int, gen: Generator[Any, None, None]) -> Generator[Any, None, None]:
    """``gen``'s items, each step run with ``device`` current (the caller's device between
    steps); an exception thrown in is passed on to ``gen``, as if it were iterated directly."""
    thrown: BaseException | None = None
    try:
        while True:
            with Device(device):
                try:
                    item = next(gen) if thrown is None else gen.throw(thrown)
                except StopIteration:
                    return
                finally:
                    thrown = None
            try:
                yield item
            except GeneratorExit:
                raise
            except BaseException as e:  # noqa: BLE001  (KeyboardInterrupt too: gen decides)
                thrown = e
    finally:
        with Device(device):
            gen.close()
