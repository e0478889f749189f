"""InferPool: fast, trustworthy PyTorch model serving over HTTP on CPUs.

The one import name the distribution installs. The repository keeps its top-level folders
(engine/, service/, config/, cli/, harness/); this package reaches them through symlinks, so
``inferpool.engine`` is ``engine/`` whether InferPool runs from a checkout, an editable install
or a wheel, and no generic top-level name (``config``, ``engine``, ...) lands in site-packages
to clash with a user's own modules.
"""
