"""The request path: from a caller's inputs to its answer, for a model already loaded and measured.

- ``served``: ``ServedModel``, one model served behind the engine's narrow client
  (inferpool.engine.client); what the service awaits.
- ``admission``: take a request, or refuse it before it queues (queue depth, predicted wait).
- ``requests``: a request's ``Work`` and its ``Prediction``.
- ``pipeline``: what every executor runs for a request (validate, pre-process, call, check, answer).
- ``call_stop``: stopping a call once none of its callers waits.
- ``runtime_set`` and ``pool``: the per-worker runtimes and the lease of one for a call.
- ``faults``: checks on what a model returns.

Where the request runs (inline, worker threads, the batcher) is inferpool.engine.executors';
what was measured at start-up to set it up is inferpool.engine.plan's. Nothing is imported
here: importing one module of this package loads only what that module needs.
"""
