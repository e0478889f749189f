"""Relative paths in a config file are the file's; on the command line, the current directory's."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from inferpool.config import load_settings
from inferpool.config.paths import make_importable, resolve_paths


def test_a_config_files_relative_paths_are_taken_from_its_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    project = tmp_path / "project"
    (project / "deploy" / "repo").mkdir(parents=True)
    config = project / "deploy" / "serve.toml"
    config.write_text(
        'app_dir = ".."\nmodel_repository = "repo"\n[runtime]\ncompile_cache_dir = "cache"\n'
        '[[models]]\nsource = "inferpool.engine.zoo.mlp:build"\nname = "mlp"\n'
    )
    monkeypatch.chdir(tmp_path)  # anywhere but the config's folder
    settings = load_settings(config)
    assert settings.app_dir.resolve() == project.resolve()
    assert settings.model_repository is not None
    assert settings.model_repository.resolve() == (project / "deploy" / "repo").resolve()
    assert Path(settings.runtime.compile_cache_dir) == project.resolve() / "deploy" / "cache"
    assert settings.models[0].source == "inferpool.engine.zoo.mlp:build"  # an import string is not a path


def test_flags_take_paths_from_the_current_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    (tmp_path / "repo").mkdir()
    monkeypatch.chdir(tmp_path)
    settings = load_settings(None, ["--model-repository", "repo", "--app-dir", "src"])
    assert settings.model_repository == Path("repo")
    assert settings.app_dir == Path("src")


def test_archives_and_absolute_or_empty_paths():
    folder = Path("/etc/inferpool")
    data = resolve_paths(
        {
            "model": "models/net.pt2",
            "metrics_dir": "/var/run/metrics",
            "runtime": {"compile_cache_dir": ""},
            "models": [{"source": "m.onnx", "runtime": {"compile_cache_dir": "c"}}, {"source": "pkg.mod:build"}],
        },
        folder,
    )
    assert data["model"] == "/etc/inferpool/models/net.pt2"
    assert data["metrics_dir"] == "/var/run/metrics"
    assert data["runtime"] == {"compile_cache_dir": ""}  # "" keeps meaning "the default cache"
    assert data["models"] == [
        {"source": "/etc/inferpool/m.onnx", "runtime": {"compile_cache_dir": "/etc/inferpool/c"}},
        {"source": "pkg.mod:build"},
    ]


def test_the_app_dir_goes_first_on_the_import_path_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    make_importable(tmp_path)
    make_importable(tmp_path)
    assert sys.path[0] == str(tmp_path.resolve())
    assert sys.path.count(str(tmp_path.resolve())) == 1
