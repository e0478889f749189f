"""Model sources: the source string picks the loader, and every failure says what to fix."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from inferpool.engine.errors import ModelLoadError
from inferpool.engine.models.source_kinds import ARCHIVE_SUFFIXES
from inferpool.engine.models.sources import (
    SOURCES,
    import_object,
    load_export,
    load_factory,
    load_model,
    source_kind,
)
from inferpool.engine.models.spec import ModelSpec
from inferpool.engine.zoo import mlp


def not_a_spec() -> object:
    return {"module": None}


@pytest.mark.parametrize(
    ("source", "kind"),
    [
        ("inferpool.engine.zoo.mlp:build", "factory"),
        ("models/resnet.pt2", "export"),
        ("legacy.ts", "torchscript"),
        ("legacy.torchscript", "torchscript"),
        ("weights.pt", "folder"),  # no ':' and not an archive: a path, whose loader says what it takes
    ],
)
def test_the_suffix_picks_the_loader(source, kind):
    assert source_kind(source) == kind
    assert kind in SOURCES


def test_every_archive_suffix_has_a_loader():
    assert set(ARCHIVE_SUFFIXES.values()) <= set(SOURCES)


def test_import_object_names_the_form_and_the_import_error():
    assert import_object("inferpool.engine.zoo.mlp:build", "model factory") is mlp.build
    form = r"model factory 'inferpool\.engine\.zoo\.mlp' must look like 'package\.module:function'"
    with pytest.raises(ModelLoadError, match=form):
        import_object("inferpool.engine.zoo.mlp", "model factory")
    with pytest.raises(ModelLoadError, match=r"cannot import handler 'no\.such\.module:x'"):
        import_object("no.such.module:x", "handler")
    with pytest.raises(ModelLoadError, match=r"cannot import model factory 'inferpool\.engine\.zoo\.mlp:nope'"):
        import_object("inferpool.engine.zoo.mlp:nope", "model factory")


def test_a_factory_named_by_a_pre_inferpool_module_says_what_to_write():
    # (In a checkout the folder cli/ itself imports as `cli`; the module below exists nowhere.)
    with pytest.raises(ModelLoadError, match=r"write 'inferpool\.cli\.no_such_module'.*from inferpool\.engine import"):
        import_object("cli.no_such_module:build", "model factory")


def test_a_missing_user_module_points_at_the_app_dir():
    with pytest.raises(ModelLoadError, match=r"'mymodels_nowhere' is looked up in the app dir \(--app-dir"):
        import_object("mymodels_nowhere:build", "model factory")


def test_a_factory_must_return_a_model_spec():
    spec = load_factory("inferpool.engine.zoo.mlp:build")
    assert isinstance(spec, ModelSpec)
    with pytest.raises(ModelLoadError, match=r"returned dict, not inferpool\.engine\.ModelSpec"):
        load_factory(f"{__name__}:not_a_spec")


def test_a_missing_or_corrupt_archive_says_which_file(tmp_path: Path):
    missing = tmp_path / "gone.pt2"
    with pytest.raises(ModelLoadError, match=r"'.*gone\.pt2' does not exist; give the path of a \.pt2 file"):
        load_model(str(missing))
    corrupt = tmp_path / "corrupt.pt2"
    corrupt.write_bytes(b"not a zip archive")
    with pytest.raises(ModelLoadError, match=r"cannot load torch.export archive '.*corrupt\.pt2'"):
        load_export(str(corrupt))


def test_an_exported_archive_round_trips_with_a_dynamic_batch(tmp_path: Path):
    spec = mlp.build()
    batch = torch.export.Dim("batch", min=1, max=64)
    args = tuple(torch.cat([t, t]) for t in spec.example_inputs.values())  # size 2: export specialises 1
    program = torch.export.export(spec.module, args, dynamic_shapes=({0: batch},))
    path = tmp_path / "mlp_export.pt2"
    torch.export.save(program, path)

    loaded = load_model(str(path))
    assert loaded.name == "mlp_export"
    assert loaded.batched
    (name,) = loaded.example_inputs
    assert loaded.example_inputs[name].shape == (2, 64)  # the smallest example size export accepts
    x = torch.randn(5, 64)
    with torch.inference_mode():
        torch.testing.assert_close(loaded.module(x), spec.module(x))
