"""RuntimeOptions: how runtimes are built and run (the analogue of Static Runtime's options)."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, model_validator
from pydantic.dataclasses import dataclass
from pydantic_core import ArgsKwargs

from inferpool.engine.backends import BACKENDS, AotiInterface
from inferpool.engine.backends.held_out_file import check_file
from inferpool.engine.backends.native_bf16 import MODES as NATIVE_BF16_MODES
from inferpool.engine.plan.dispatch_modes import DISPATCH_MODES

LEND_MODES = ("auto", "on", "off")
"""``lend_idle_cores``: measured, always, never (inferpool.engine.plan.wide)."""
WAIT_MODES = ("auto", "on", "off")
"""``wait_for_company``: where batching measures a gain, always, never (inferpool.engine.plan.batch_choice)."""
AUTO_CANDIDATES = ("eager", "static", "onnxruntime")
"""``auto``'s candidates when ``auto_backends`` is (): the ones that compile in about a second
or less. aoti (tens of seconds on a first compile) and torchscript (deprecated upstream, warns)
are timed only when listed."""
PRECISIONS = ("auto", "fp32", "int8", "bf16")
INT8_BACKENDS = ("onnxruntime", "openvino")
BF16_BACKENDS = ("openvino",)
"""Backends that run a model in bfloat16: OpenVINO's CPU plugin, where the CPU has the
instructions (AMX, AVX-512 BF16). onnxruntime's CPU kernels have no bf16 MatMul to gain from."""
REDUCED_BACKENDS = {"int8": INT8_BACKENDS, "bf16": BF16_BACKENDS}
AUTO_MAX_BATCH = 8
"""The batch ``max_batch_size = 0`` serves where start-up finds batching pays (inferpool.engine.plan.auto_batch):
the size start-up times beside one sample, and where ResNet-50 (bf16, one thread a call) and a bge-sized
text encoder gained most under load (docs/BENCHMARKS.md)."""
INT8_METHODS = ("dynamic", "static")
"""The quantizers of inferpool.engine.backends.quantize.QUANTIZERS, by name."""
REMOVED = {
    "inline_below_us": "dispatch='auto' no longer compares the call's duration with a fixed threshold: it "
    "measures how long the call holds the GIL and what a hand-off to a worker thread costs "
    "(engine/plan/dispatch_choice.py); remove the option, or set dispatch='inline' or 'threads' to choose yourself",
}
"""Options that were removed, with what to do instead: named in the error, not silently ignored."""


@dataclass(frozen=True, config=ConfigDict(extra="forbid"))
class RuntimeOptions:
    backend: str = "auto"
    """Which runtime implementation runs the model (``inferpool.engine.backends.BACKENDS``), or ``auto``
    (the default): at startup, time the candidates that can load the model (``auto_backends``;
    by default eager, static and onnxruntime, a few seconds in all) and serve with the fastest
    (the table is logged and served at ``/v2/models/{name}/config``); set the winner by name
    afterwards for faster, reproducible restarts. ``eager`` runs the ``nn.Module`` under
    ``torch.inference_mode`` and always works. ``torchscript`` runs legacy TorchScript (``.ts``
    archives) through PyTorch's Static Runtime; deprecated upstream."""

    num_runtimes: int = 0
    """Runtimes (and worker threads) in the pool; 0 = one per usable CPU divided by
    ``intra_op_threads``. Raise it only for models that release the GIL for most of a call
    (large tensor ops); for tiny models more threads than cores only add hand-off cost."""

    intra_op_threads: int = 1
    """PyTorch threads used inside one operator. 1 is best for many small concurrent
    requests (parallelism comes from runtimes); raise it for few large requests.
    ``intra_op_threads * num_runtimes`` must fit the CPUs this process may use."""

    cleanup_activations: bool = True
    """Release a runtime's planned activation/output buffers after each run (lower idle
    memory) or keep them for the next request (no re-allocation). Honoured by backends that
    plan memory; ``eager`` has nothing to keep, since PyTorch frees each intermediate after
    its last use, so there the option has no effect. ``static`` frees its one slab per input
    shape and allocates it again at the next run (one allocation per run, not one per value;
    no measurable cost on the MLP or the digits CNN, docs/BENCHMARKS.md)."""

    warmup_iters: int = 3
    """Calls on the example inputs per runtime before the service reports ready, so that the
    first real request pays no allocator or lazy-initialisation cost. 0 skips warm-up."""

    check_inputs: bool = True
    """Validate every dimension and reject NaN/inf (True), or only check the number of
    elements per sample and reshape (False; the AOTInductor-style minimum for trusted
    clients that want the least per-call overhead)."""

    check_outputs: bool = False
    """Fail a request whose float outputs contain NaN or infinity (``ModelFailed``, HTTP 500,
    naming the output) instead of returning them (JSON has no NaN, so clients would get
    ``null``). With batching only the requests whose own rows are affected fail. Turn it on
    for models that can overflow or divide by zero on odd inputs; it costs one ``isfinite``
    pass over every float output per request (a few µs, plus time proportional to the outputs'
    size: docs/BENCHMARKS.md), which is why it is off by default. A non-finite output does not
    replace the runtime: it comes from the input, not from a broken runtime."""

    dispatch: str = "auto"
    """Where inference runs: ``threads`` (worker threads; the event loop stays responsive),
    ``inline`` (on the event loop: no hand-off cost; a slow call delays every other request),
    or ``auto`` (the default): at startup, measure the chosen backend's call, the share of it
    that holds the GIL and what a hand-off to a worker thread costs (a fraction of a second), and run inline
    unless the call releases the GIL for longer than a hand-off costs (with 2+ usable CPUs) or
    is so long that it would stall the event loop (engine/plan/dispatch_choice.py; the figures are
    logged and served at ``/v2/models/{name}/config``). Batching always uses its own threads."""

    oversubscribe: bool = False
    """Allow ``num_runtimes * intra_op_threads`` above the usable CPUs (with a warning)
    instead of refusing to start. Only for models whose calls mostly run outside the GIL."""

    borrow_timeout: float = 5.0
    """Seconds a worker waits for a free runtime before the request fails as overloaded."""

    max_request_samples: int = 1024
    """Most samples one request may carry; more is refused (400) before any conversion, which
    bounds what one request can allocate and how long it holds a runtime. Raise it for bulk
    offline scoring; lower it to keep tail latency predictable for many small clients."""

    max_batch_size: int = 0
    """Most samples one model call may carry when concurrent requests are batched together.
    0, the default, leaves it to start-up (inferpool.engine.plan.auto_batch): up to 8 where the
    chosen backend's calls run on worker threads, are long next to ``max_queue_delay_us`` and a
    call of 8 measured at least 1.1x the samples/s of one (ResNet-50), else 1; the choice and its
    reason are logged and shown as ``batch_selection`` at ``/v2/models/{name}/config``. 1 turns
    batching off: each request is its own call, except that a model served inline runs the
    requests one event-loop wake-up completes as one call (inferpool.engine.serving.inline_group).
    Batching pays off when a call's fixed cost (Python dispatch between ops, kernel launch) is
    large next to its per-sample cost and many clients send small requests at once; set the batch
    size where a call's time per sample stops falling (loadtest/bench/batching.py measures it).
    Set 1 for models whose outputs have no batch dimension, or when latency at low load matters
    most."""

    max_queue_delay_us: float = 500.0
    """How long, in microseconds, the first request of a batch may wait for company before
    the batch runs anyway (only with ``max_batch_size`` > 1). Under load batches fill from
    the queue without waiting; this only adds latency when traffic is light. Lower it for
    tighter latency, raise it (towards one model call's time) for fuller batches."""

    wait_for_company: str = "auto"
    """Whether a lone request waits ``max_queue_delay_us`` for others to batch with: ``auto``
    where the start-up timings show batching gains (a full batch at least 1.1x the samples/s
    of one sample), else it runs with whatever is already queued; ``on`` always waits; ``off``
    never does (only with ``max_batch_size`` > 1)."""

    preferred_batch_sizes: tuple[int, ...] = ()
    """Batch sizes at which a forming batch runs at once instead of waiting for more company
    (``max_batch_size`` always is one). Set them to sizes the backend runs especially well
    (e.g. ones it was compiled or tuned for); () waits for ``max_batch_size`` or the delay."""

    enable_out_variant: bool = True
    """``static`` backend: run ops through their ``out=`` overloads into buffers the runtime
    keeps, instead of allocating each result (Static Runtime's out variants). Only ops whose
    ``out=`` overload gives exactly the functional result on the example inputs, and whose
    result sizes follow from the input sizes, use it. On small CPU models it saves nothing
    measurable (allocating a few KiB is cheap next to an op call). Off = plain functional
    calls, for debugging a suspected planner bug."""

    optimize_memory: bool = True
    """``static`` backend: let intermediate values whose lifetimes do not overlap share bytes
    in the runtime's slab (smaller idle memory: 9 vs 17 KiB on the digits CNN at batch 32).
    Off = one byte range per value. The slab is one allocation either way."""

    manage_output_tensors: bool = False
    """``static`` backend: write outputs into buffers the runtime owns and reuses. Results
    outlive the borrow (``ServedModel`` returns them after the runtime is back in the pool;
    batching slices and the service encodes them later), so managed outputs are copied before
    ``run`` returns: correct, but never faster than fresh outputs. Leave it off."""

    compiled_batch_sizes: tuple[int, ...] = ()
    """``aoti`` backend: the batch sizes to compile (AOTInductor packages have static shapes:
    one package per size, each tens of seconds to compile on first start, then loaded from
    ``compile_cache_dir``). A request runs on the smallest compiled size that holds it (its
    rows copied into a zero-padded buffer that the compiled call reads in place) or is split
    into chunks of the largest; it never runs at a shape that was not compiled. Padding costs
    the padded rows' compute, so list the sizes your traffic has; () = 1, ``max_batch_size``
    and ``preferred_batch_sizes`` (which is what batching produces; for ``max_batch_size = 0``,
    the 8 start-up may choose)."""

    aoti_interface: str = AotiInterface.MINIMAL_ARRAYREF.value
    """``aoti`` backend: ``minimal_arrayref`` calls the compiled library's C ABI through ctypes
    on the request's arrays (no tensor wrapping), releasing the GIL for the whole call, so
    runtimes on several threads run in parallel; weights are loaded once per compiled size and
    shared by every runtime's model instance. ``loader`` runs PyTorch's package loader with one
    runner per runtime (weights shared too), which holds the GIL during the call; use it when
    the minimal interface cannot compile the model. Each interface has its own packages."""

    compile_cache_dir: str = ""
    """Where compiled artifacts (AOTInductor packages, ``<model>-b<size>-<hash>.pt2``) are
    cached by a hash of the exported graph, the weights, the options that shape them, torch and
    the CPU, so that a restart does not recompile; "" = ``$XDG_CACHE_HOME/inferpool``
    (``~/.cache/inferpool``). Point it at a volume, or at the directory ``inferpool compile``
    wrote, in containers (built on the CPU type that serves). A corrupt file stops startup
    with its path: delete it and it is rebuilt."""

    lend_idle_cores: str = "auto"
    """A call running alone in the whole server may use every usable CPU instead of its
    runtime's ``intra_op_threads`` (inferpool.engine.plan.wide): ``auto`` (the default) measures the
    example call at startup and lends when the call takes over 2 ms and runs at least 1.15x faster
    wide; ``on`` lends without the gate; ``off`` never. Costs one more copy of the backend's
    artifact per serving process where it is on (onnxruntime only today). Ignored when
    ``intra_op_threads`` is above 1: the plan is then yours."""

    auto_backends: tuple[str, ...] = ()
    """``auto`` backend: the backends to try and time at startup; () = ``AUTO_CANDIDATES``
    (eager, static, onnxruntime: about a second each for a small model, ~10 s each for a
    ResNet-50; static is skipped where eager's call is long and another candidate is far faster,
    inferpool.engine.backends.auto_prune). Each candidate timed is compiled first, so startup
    takes as long as their compiles together: list ``aoti`` (tens of
    seconds unless ``compile_cache_dir`` already has the package) or ``torchscript`` to have
    them timed too, or set ``backend`` to the winner once you know it. Ignored unless
    ``backend`` is ``auto``."""

    precision: str = "auto"
    """``auto`` (the default): fp32, unless the CPU runs bfloat16 natively (``native_bf16``), the
    fp32 winner's call is long enough for it to matter (1 ms or more: never the digits CNN) and
    the model compiled in bf16 (OpenVINO's CPU plugin) both passes the accuracy gate against fp32
    and measures at least 1.2x faster at the served batch; otherwise fp32, and the log and
    ``/v2/models/{name}/config`` say why. The verdict is cached with the export: a warm start
    neither gates nor times again (engine/backends/precision_auto.py). ``fp32``: bit-faithful
    fp32, never anything else. ``int8`` (backends ``onnxruntime`` and ``openvino``, named, not
    ``auto``): the model's ONNX export quantized (``int8_methods``); it needs real calibration
    data to be trusted, so it is never chosen for you. ``bf16`` (backend ``openvino``): the export
    compiled to run in bfloat16, whatever the speed rule says. Asked by name, int8 or bf16 is
    served only if it passes the accuracy gate (``accuracy_min_cosine``,
    ``accuracy_min_agreement``, ``accuracy_inputs``) and measures faster than fp32 at start-up;
    one that fails is served in fp32 with a warning naming the measured figures, or refused with
    ``precision_strict`` (engine/backends/precision.py)."""

    native_bf16: str = "auto"
    """Whether ``precision = "auto"`` may try bf16: ``auto`` reads the CPU's flags (AMX-BF16 or
    AVX-512 BF16), ``off`` says this CPU has none (bf16 is never tried: a fleet of mixed nodes
    that must choose alike, or a test), ``on`` trusts you where the flags cannot be read."""

    int8_methods: tuple[str, ...] = ()
    """``precision = "int8"``: the quantizers to try, of ``dynamic`` (MatMul/Gemm, no calibration)
    and ``static`` (QDQ on Conv/MatMul/Gemm, calibrated; only for a graph with convolutions);
    () = every one that applies, raced against fp32: of those that pass the gate and fp32, the
    fastest example call at start-up is served. Named, they race only each other: int8 is served
    whenever one passes."""

    precision_strict: bool = False
    """``precision`` int8 or bf16: refuse to start when it fails the gate, instead of serving fp32;
    and serve it when it passes even where fp32 measures faster."""

    accuracy_min_cosine: float = 0.99
    """The int8 gate: the least cosine similarity between an int8 output item (a row of a batched
    output that is not a classifier's probabilities) and its fp32 counterpart, for every item."""

    accuracy_min_agreement: float = 0.99
    """The int8 gate for classifiers: the least share of items whose labels (integer outputs, and the
    argmax of outputs whose rows are probabilities) equal fp32's (top-1 agreement)."""

    accuracy_inputs: str = ""
    """The int8 gate's held-out inputs, varied and real: a ``.jsonl`` file, one call a line, each
    a JSON object of the model's inputs as a ``/predict`` request's ``inputs`` holds them
    (``{"image": [[...]]}``: one sample or a batch; for a text model, token ids), or an ``.npz``
    of arrays named as the inputs. Static int8 calibrates on every 4th line, the gate takes the
    others. "" = the model's own held-out inputs if it has them (MiniLM, digits), else the
    example inputs and seeded random variations of their float inputs (integer inputs stay)."""

    @model_validator(mode="before")
    @classmethod
    def _removed(cls, data: Any) -> Any:
        given = (data.kwargs or {}) if isinstance(data, ArgsKwargs) else data
        for name, instead in REMOVED.items():
            if isinstance(given, dict) and name in given:
                raise ValueError(f"{name} was removed: {instead}")
        return data

    def __post_init__(self) -> None:
        checks = {
            "num_runtimes": (self.num_runtimes >= 0, "use 0 for automatic or a positive count"),
            "intra_op_threads": (self.intra_op_threads >= 1, "use 1 or more"),
            "max_request_samples": (self.max_request_samples >= 1, "use 1 or more"),
            "warmup_iters": (self.warmup_iters >= 0, "use 0 to skip warm-up or a positive count"),
            "borrow_timeout": (self.borrow_timeout > 0, "use a positive number of seconds"),
            "dispatch": (self.dispatch in DISPATCH_MODES, f"use one of {DISPATCH_MODES}"),
            "lend_idle_cores": (self.lend_idle_cores in LEND_MODES, f"use one of {LEND_MODES}"),
            "native_bf16": (self.native_bf16 in NATIVE_BF16_MODES, f"use one of {NATIVE_BF16_MODES}"),
            "wait_for_company": (self.wait_for_company in WAIT_MODES, f"use one of {WAIT_MODES}"),
            "max_batch_size": (
                self.max_batch_size >= 0,
                "use 0 to let start-up choose, 1 to turn batching off, or the largest batch to run",
            ),
            "max_queue_delay_us": (
                self.max_queue_delay_us >= 0,
                "use a non-negative number of microseconds (0 = run whatever is queued at once)",
            ),
            "preferred_batch_sizes": (
                all(1 <= size <= self.max_batch_size for size in self.preferred_batch_sizes),
                f"use sizes between 1 and max_batch_size ({self.max_batch_size}), which a list of sizes needs set "
                "(0 leaves it to start-up), or () for none",
            ),
            "compiled_batch_sizes": (
                all(size >= 1 for size in self.compiled_batch_sizes),
                "use positive batch sizes, e.g. (1, 8, 32), or () for 1, max_batch_size (8 for 0) and "
                "preferred_batch_sizes",
            ),
            "aoti_interface": (
                self.aoti_interface in set(AotiInterface),
                f"use one of {[i.value for i in AotiInterface]} ({AotiInterface.MINIMAL_ARRAYREF.value!r} releases the "
                f"GIL, {AotiInterface.LOADER.value!r} is PyTorch's own, for a model the minimal one cannot compile)",
            ),
        }
        if self.auto_backends:
            checks["auto_backends"] = (
                set(self.auto_backends) <= set(BACKENDS) and len(set(self.auto_backends)) == len(self.auto_backends),
                f"use names from {sorted(BACKENDS)}, each once, or () for {list(AUTO_CANDIDATES)}",
            )
        checks["precision"] = (
            self.precision in PRECISIONS and self.backend in REDUCED_BACKENDS.get(self.precision, (self.backend,)),
            f"use one of {list(PRECISIONS)} (auto: bf16 where it is native, passes the gate and measures faster, "
            f"else fp32; fp32: always fp32); int8 needs backend {' or '.join(map(repr, INT8_BACKENDS))}, named, "
            f"and bf16 needs {' or '.join(map(repr, BF16_BACKENDS))} (backend auto compares backends with eager at "
            "each one's float tolerance, which reduced precision is not within)",
        )
        checks["accuracy_min_cosine"] = (-1 <= self.accuracy_min_cosine <= 1, "use a cosine between -1 and 1")
        checks["accuracy_min_agreement"] = (0 <= self.accuracy_min_agreement <= 1, "use a share between 0 and 1")
        checks["int8_methods"] = (
            set(self.int8_methods) <= set(INT8_METHODS),
            f"use names from {list(INT8_METHODS)}, or () for every one that applies to the model",
        )
        if self.accuracy_inputs:
            wrong = check_file(self.accuracy_inputs)
            checks["accuracy_inputs"] = (wrong is None, wrong or "")
        if self.max_batch_size > 1 and self.dispatch == "inline":
            fix = "batching runs on worker threads: use 'threads' or 'auto', or max_batch_size=1"
            checks["dispatch"] = (False, fix)
        for name, (ok, fix) in checks.items():
            if not ok:
                raise ValueError(f"{name}={getattr(self, name)!r} is invalid: {fix}")

    @property
    def largest_batch(self) -> int:
        """The most samples a batched call may carry: ``max_batch_size``, or for 0 the most that
        start-up may choose (what a backend compiles for and start-up times beside one sample)."""
        return self.max_batch_size or AUTO_MAX_BATCH
