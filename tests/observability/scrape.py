"""Scraping /metrics as Prometheus does, and reading the answer with prometheus_client's own
parser: the figures a test compares are the ones a scraper would store."""

from __future__ import annotations

from collections import Counter

from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

Sample = tuple[str, tuple[tuple[str, str], ...]]


def scrape(client: Client | None = None, **headers: str) -> dict[Sample, float]:
    """Every sample of a GET /metrics from the loopback: {(name, sorted labels): value}."""
    response = (client or Client()).get("/metrics", REMOTE_ADDR="127.0.0.1", **headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[sample.name, tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def total(samples: dict[Sample, float], name: str, **labels: str) -> float:
    """The sum of `name`'s samples whose labels include `labels`."""
    return sum(
        value
        for (sample, sample_labels), value in samples.items()
        if sample == name and labels.items() <= dict(sample_labels).items()
    )


def by(samples: dict[Sample, float], name: str, label: str, **labels: str) -> Counter:
    """`name`'s values summed by one label, among the samples that have `labels`."""
    out: Counter = Counter()
    for (sample, sample_labels), value in samples.items():
        found = dict(sample_labels)
        if sample == name and labels.items() <= found.items():
            out[found[label]] += value
    return +out


def moved(before: dict[Sample, float], after: dict[Sample, float], name: str) -> dict:
    """How each of `name`'s samples moved between two scrapes (only those that did)."""
    keys = {key for key in (*before, *after) if key[0] == name}
    deltas = {key[1]: after.get(key, 0) - before.get(key, 0) for key in keys}
    return {labels: delta for labels, delta in deltas.items() if delta}
