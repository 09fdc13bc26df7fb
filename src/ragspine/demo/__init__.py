"""A small, deterministic demo corpus of chart-heavy reports (see :mod:`ragspine.demo.corpus`)."""

from ragspine.demo.corpus import (
    DEMO_LIBRARY,
    DemoDocument,
    build_demo_corpus,
    demo_queries,
    demo_query_cases,
)

__all__ = ["DEMO_LIBRARY", "DemoDocument", "build_demo_corpus", "demo_queries", "demo_query_cases"]
