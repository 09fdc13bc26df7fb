"""Prometheus metrics of one app instance (its own registry, so several apps can coexist)."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "ragspine_requests_total", "HTTP requests by route template, method and status",
            ["route", "method", "status"], registry=self.registry,
        )
        self.latency = Histogram(
            "ragspine_request_seconds", "HTTP request latency by route template",
            ["route", "method"], registry=self.registry,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )
        self.pages_ingested = Counter(
            "ragspine_pages_ingested_total", "Pages indexed", registry=self.registry
        )
        self.pages_dropped = Counter(
            "ragspine_pages_dropped_total", "Pages dropped by the RESTRICTED policy", registry=self.registry
        )
        self.ingest_stage_seconds = Counter(
            "ragspine_ingest_stage_seconds_total", "Seconds ingests spent in each stage (ragspine.indexing.stages): "
            "the largest of parse, render_wait, encode_wait, points, write_wait and commit bounds the ingest", ["stage"],
            registry=self.registry,
        )
        self.degraded_answers = Counter(
            "ragspine_degraded_answers_total", "Search answers marked degraded, by reason",
            ["reason"], registry=self.registry,
        )

    def ocr_backlog(self, documents: Callable[[], float], pages: Callable[[], float]) -> None:
        """Gauges read at scrape time: documents whose second OCR phase is queued or running,
        and pages handed to the OCR workers and not yet read."""
        Gauge("ragspine_ocr_backlog_documents", "Documents whose OCR (second ingest phase) is queued or running",
              registry=self.registry).set_function(documents)
        Gauge("ragspine_ocr_backlog_pages", "Pages handed to the OCR worker processes and not yet read",
              registry=self.registry).set_function(pages)
        self.ocr_finished = Counter(
            "ragspine_ocr_documents_total", "Documents whose second OCR phase ended, by outcome",
            ["outcome"], registry=self.registry)

    def dense_backlog(self, documents: Callable[[], float]) -> None:
        """A gauge read at scrape time: documents whose dense phase is queued or running."""
        Gauge("ragspine_dense_backlog_documents", "Documents searchable by their words whose passages' dense "
              "vectors are queued or being encoded", registry=self.registry).set_function(documents)

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        self.requests.labels(route, method, str(status)).inc()
        self.latency.labels(route, method).observe(seconds)

    def ingested(self, pages: int, dropped: int, stages: dict[str, float] | None = None) -> None:
        self.pages_ingested.inc(pages)
        self.pages_dropped.inc(dropped)
        for stage, seconds in (stages or {}).items():
            self.ingest_stage_seconds.labels(stage).inc(max(0.0, seconds))

    def degraded(self, reason: str) -> None:
        self.degraded_answers.labels(reason).inc()

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
