"""Ingest: readers per format → chunker → bulk writer."""
