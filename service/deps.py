"""Dependencies injected into routes."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from config import Settings
from engine import ServedModel
from service.host import ModelHost
from service.metrics import Metrics


def get_host(request: Request) -> ModelHost:
    host: ModelHost = request.app.state.host
    return host


def get_model(request: Request) -> ServedModel:
    return get_host(request).get()


def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def get_metrics(request: Request) -> Metrics:
    metrics: Metrics = request.app.state.metrics
    return metrics


HostDep = Annotated[ModelHost, Depends(get_host)]
ModelDep = Annotated[ServedModel, Depends(get_model)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]
