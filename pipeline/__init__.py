"""snim-batch: decide who wins S-Nim positions at data-warehouse scale."""

__version__ = "0.1.0"
