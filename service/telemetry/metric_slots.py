"""Preallocated metric slots: where a request's counts and sums go, and how they are rendered.

An observation is a ``bisect`` and two float adds into slots that belong to one label set.
In one process the slots are a list, rendered by a collector at scrape time; with several
processes they live in an mmap file per process laid out as prometheus-client's own
multiprocess files, so that its ``MultiProcessCollector`` merges them with no flush and no lag.
"""

from __future__ import annotations

import mmap
import os
import struct
import threading
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol, cast

from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.mmap_dict import MmapedDict, mmap_key
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

INF = float("inf")


class Slots(Protocol):
    """Where counts and sums live: a list in one process, an mmap file's memoryview in several."""

    def __getitem__(self, index: int, /) -> float: ...
    def __setitem__(self, index: int, value: float, /) -> None: ...


# One label set: its slots, the index of each bucket's count then of the sum, the bucket
# bounds. A counter has one index and no bounds.
Child = tuple[Slots, tuple[int, ...], tuple[float, ...]]


def bounds_of(buckets: tuple[float, ...]) -> tuple[float, ...]:
    """As prometheus-client's Histogram takes them: sorted, +Inf added."""
    bounds = [float(b) for b in buckets]
    if not bounds or bounds[-1] != INF:
        bounds.append(INF)
    if bounds != sorted(bounds) or len(bounds) < 2:
        raise ValueError(f"histogram buckets must be sorted and not empty: {buckets}")
    return tuple(bounds)


def observe(child: Child, x: float) -> None:
    slots, index, bounds = child
    slots[index[bisect_left(bounds, x)]] += 1.0  # left: a value equal to a bound counts in it (le)
    slots[index[-1]] += x


def _go(bound: float) -> str:
    text: str = floatToGoString(bound)  # type: ignore[no-untyped-call]
    return text


@dataclass
class Family:
    name: str  # a counter's without _total, as prometheus-client spells it
    doc: str
    labels: tuple[str, ...]
    bounds: tuple[float, ...] = ()  # none: a counter
    children: dict[tuple[str, ...], Child] = field(default_factory=dict)
    created: dict[tuple[str, ...], float] = field(default_factory=dict)

    def keys(self, values: tuple[str, ...]) -> list[str]:
        """Each slot's key in prometheus-client's multiprocess files."""
        labels, doc, name = list(self.labels), self.doc, self.name
        if not self.bounds:
            return [mmap_key(name, name + "_total", labels, list(values), doc)]
        buckets = [mmap_key(name, name + "_bucket", [*labels, "le"], [*values, _go(b)], doc) for b in self.bounds]
        return [*buckets, mmap_key(name, name + "_sum", labels, list(values), doc)]

    def collect(self) -> Metric:
        """One process's family, as prometheus-client's own Counter or Histogram renders it."""
        if not self.bounds:
            counter = CounterMetricFamily(self.name, self.doc, labels=self.labels)
            for values, (slots, index, _) in list(self.children.items()):
                counter.add_metric(values, slots[index[0]], created=self.created[values])
            return counter
        histogram = HistogramMetricFamily(self.name, self.doc, labels=self.labels)
        for values, (slots, index, bounds) in list(self.children.items()):
            total, buckets = 0.0, []
            for bound, i in zip(bounds, index, strict=False):  # the last index, the sum's, is left over
                total += slots[i]
                buckets.append((_go(bound), total))
            histogram.add_metric(values, buckets, slots[index[-1]])
            labels = dict(zip(self.labels, values, strict=True))
            histogram.samples.append(Sample(self.name + "_created", labels, self.created[values]))
        return histogram


class SlotCollector:
    def __init__(self, families: list[Family]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        return (family.collect() for family in self.families)


class SlotFile:
    """Float slots in an mmap file laid out as prometheus-client's ``MmapedDict`` (bytes used,
    then entries: key length, key padded to 8 bytes, value, timestamp), so that its
    ``MultiProcessCollector`` merges it like its own files. Values are written in place: an
    aligned 8-byte store, which a reader in another process never sees torn."""

    INITIAL_BYTES = 1 << 20  # sparse, pages cost once touched; ~300 label sets fit

    def __init__(self, path: str) -> None:
        self._path = path
        with open(path, "a+b") as file:
            self._capacity = max(os.fstat(file.fileno()).st_size, self.INITIAL_BYTES)
        self._map()
        self._used: int = struct.unpack_from("i", self._raw, 0)[0] or 8
        # A reused pid (a restarted worker) finds its predecessor's file: carry on counting.
        found = MmapedDict.read_all_values_from_file(path)  # type: ignore[no-untyped-call]
        self._index: dict[str, int] = {key: pos // 8 for key, _, _, pos in found}

    def _map(self) -> None:
        # Growing maps the file anew; children keep the view they were given (MAP_SHARED: an
        # old view still writes the same pages), so nothing on the hot path has to move.
        with open(self._path, "r+b") as file:
            file.truncate(self._capacity)
            self._raw = memoryview(mmap.mmap(file.fileno(), self._capacity))  # keeps its own fd
        self.slots = cast(Slots, self._raw.cast("d"))

    @classmethod
    def of(cls, path: str) -> SlotFile:
        """One writer per file and process: two would append entries over each other's."""
        with _FILES_LOCK:
            found = _FILES.get(path)
            if found is None:
                found = _FILES[path] = cls(path)
            return found

    def allocate(self, keys: list[str]) -> tuple[Slots, tuple[int, ...]]:
        with _FILES_LOCK:
            for key in keys:
                if key in self._index:
                    continue
                encoded = key.encode()
                padded = encoded + b" " * (8 - (len(encoded) + 4) % 8)
                entry = struct.pack(f"i{len(padded)}sdd", len(encoded), padded, 0.0, 0.0)
                while self._used + len(entry) > self._capacity:
                    self._capacity *= 2
                    self._map()
                self._raw[self._used : self._used + len(entry)] = entry
                self._used += len(entry)
                self._raw[0:4] = struct.pack("i", self._used)  # last: a reader never sees half an entry
                self._index[key] = (self._used - 16) // 8
            return self.slots, tuple(self._index[key] for key in keys)


_FILES: dict[str, SlotFile] = {}
_FILES_LOCK = threading.Lock()
