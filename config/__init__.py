"""Configuration: ``default.toml`` beside this file, then env ``INFERPOOL_*``, then CLI flags."""

from inferpool.config.errors import error_lines
from inferpool.config.settings import DEFAULT_CONFIG_FILE, Settings, load_settings

__all__ = ["DEFAULT_CONFIG_FILE", "Settings", "error_lines", "load_settings"]
