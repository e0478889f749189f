"""Legacy TorchScript archives (``torch.jit.save``) as a model source: ``path/model.ts``.

An archive records the forward's argument names and that they are tensors, but not their
shapes or dtypes, and the service needs both (schema, warm-up, ``auto`` timing). So they come
from a small JSON description, the archive's name plus ``.json`` beside it (``model.ts.json``)
or embedded in the archive as ``inferpool.json`` (``torch.jit.save(m, path,
_extra_files={"inferpool.json": ...})``); the file beside it wins, so a description can be
fixed without rewriting the archive. Its form (see EXAMPLE_DESCRIPTION)::

    {"inputs": {"image": {"shape": [1, 1, 8, 8], "dtype": "float32"}},
     "output_names": ["probabilities", "label"], "batched": true, "name": "digits"}

``inputs`` is required (one per forward argument, in order; a bare shape list means float32);
the rest is optional. TorchScript is deprecated upstream: re-export with ``torch.export`` to a
``.pt2`` when you can.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from inferpool.engine.errors import ModelLoadError
from inferpool.engine.models.spec import ModelSpec

EMBEDDED_DESCRIPTION = "inferpool.json"
EXAMPLE_DESCRIPTION = '{"inputs": {"image": {"shape": [1, 1, 8, 8], "dtype": "float32"}}, "output_names": ["label"]}'
_DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "float16": torch.float16,
    "int64": torch.int64,
    "int32": torch.int32,
    "uint8": torch.uint8,
    "bool": torch.bool,
}


class TorchScriptArchive(torch.nn.Module):
    """A loaded archive as a plain ``nn.Module``: ScriptModules refuse ``requires_grad_``,
    which InferenceModule.from_spec calls. Any backend can run it (``eager`` through the
    TorchScript interpreter); ``torchscript`` takes ``script`` itself."""

    def __init__(self, script: torch.jit.ScriptModule) -> None:
        super().__init__()
        self.script = script

    def forward(self, *inputs: torch.Tensor) -> Any:
        return self.script(*inputs)


@contextmanager
def quiet_jit() -> Iterator[None]:
    """Silence the DeprecationWarning every ``torch.jit`` entry point now raises: the service
    warns once per load itself (see inferpool.engine.backends.torchscript), with what to do instead.
    Not thread-safe (warnings filters are global), which is fine: models load once."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning, message=r"`torch\.jit\.")
        yield


def load_torchscript(source: str) -> ModelSpec:
    path = Path(source)
    if not path.is_file():
        raise ModelLoadError(f"TorchScript archive {source!r} does not exist; give the path of a torch.jit.save file")
    extra = {EMBEDDED_DESCRIPTION: ""}
    try:
        with quiet_jit():
            module = torch.jit.load(str(path), map_location="cpu", _extra_files=extra)  # type: ignore[no-untyped-call]
    except Exception as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelLoadError(
            f"cannot load TorchScript archive {source!r}: {first_line} -- the file is truncated, corrupt or not "
            "written by torch.jit.save (a torch.export archive must end in .pt2)"
        ) from exc
    description = _description(path, extra[EMBEDDED_DESCRIPTION])
    arguments = [a.name for a in module.forward.schema.arguments[1:]]  # [0] is self
    inputs = description.get("inputs")
    if not isinstance(inputs, dict) or list(inputs) != arguments:
        raise ModelLoadError(
            f"the description of {source!r} must name the forward's inputs {arguments} in that order under "
            f'"inputs", e.g. {EXAMPLE_DESCRIPTION}; it has {list(inputs) if isinstance(inputs, dict) else inputs!r}'
        )
    return ModelSpec(
        module=TorchScriptArchive(module),
        example_inputs={name: _example(source, name, value) for name, value in inputs.items()},
        output_names=tuple(description.get("output_names", ())),
        name=str(description.get("name", path.name.split(".")[0])),
        batched=bool(description.get("batched", True)),
    )


def _description(path: Path, embedded: str | bytes) -> dict[str, Any]:
    beside = path.with_name(path.name + ".json")
    text = beside.read_text() if beside.is_file() else embedded
    if not text:
        raise ModelLoadError(
            f"TorchScript archive '{path}' does not record its input shapes and dtypes; describe them in "
            f"'{beside}' (or embed that JSON as {EMBEDDED_DESCRIPTION!r} with torch.jit.save's _extra_files), "
            f"e.g. {EXAMPLE_DESCRIPTION}"
        )
    try:
        description = json.loads(text)
    except ValueError as exc:
        raise ModelLoadError(f"the description of TorchScript archive '{path}' is not valid JSON: {exc}") from exc
    if not isinstance(description, dict):
        raise ModelLoadError(f"the description of '{path}' must be a JSON object, e.g. {EXAMPLE_DESCRIPTION}")
    return description


def _example(source: str, name: str, value: Any) -> torch.Tensor:
    """A zero tensor of the described shape and dtype (zeros: the examples only fix the schema
    and warm the runtimes)."""
    if isinstance(value, list):
        value = {"shape": value}
    shape, dtype = (value.get("shape"), value.get("dtype", "float32")) if isinstance(value, dict) else (None, None)
    if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 1 for d in shape)) or dtype not in _DTYPES:
        raise ModelLoadError(
            f"input {name!r} of {source!r} needs a shape of positive integers and a dtype in {sorted(_DTYPES)}, "
            f'e.g. {{"shape": [1, 1, 8, 8], "dtype": "float32"}}; got {value!r}'
        )
    return torch.zeros(shape, dtype=_DTYPES[dtype])
