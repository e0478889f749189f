"""Start-up: the measurements a loaded model's warm calls answer, and the plan made from them.

- ``loading``: ``ServedModel.load``'s steps, from the source (inferpool.engine.models) to the
  choices below, measured before the model takes requests.
- ``threads``: the thread budget (CPU affinity, cgroup quota) and torch's thread settings.
- ``dispatch_choice`` (with ``gil_probe``): inline on the event loop or worker threads;
  ``dispatch_modes``: what ``RuntimeOptions.dispatch`` may say.
- ``batch_choice``: whether a request waits for company.
- ``auto_batch`` (with ``batch_memory``, its decision kept for a warm start): the batch size for
  ``max_batch_size = 0``, decided after the backend, precision and dispatch.
- ``wide`` (with ``calm_timing`` and ``pod_load``): whether a call alone in the pod takes every core.
- ``deadline_floor``: the shortest deadline the model can meet.

Nothing is imported here: importing one module of this package loads only what that module needs.
"""
