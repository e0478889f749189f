"""Figures read back from a server's ``GET /metrics`` (Prometheus text)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def metric_total(text: str, name: str, **labels: str) -> float:
    """Sum of the samples called ``name`` whose labels include ``labels``, in Prometheus text."""
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and labels.items() <= sample.labels.items()
    )
