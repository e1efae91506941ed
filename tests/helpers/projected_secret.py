"""A folder laid out as the kubelet projects a Secret into a pod: each key is a link `KEY -> ..data/KEY`, `..data`
a link to a timestamped folder holding the values, and an update writes a new timestamped folder and renames a new
`..data` link over the old one, so every key changes at once (the atomic swap a rotation relies on)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


class ProjectedSecret:
    def __init__(self, directory: Path, values: Mapping[str, str]) -> None:
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self._generation = 0
        self.write(values)
        for key in values:
            (self.directory / key).symlink_to(f"..data/{key}")

    def path(self, key: str) -> str:
        return str(self.directory / key)

    def write(self, values: Mapping[str, str]) -> None:
        """Every key's new value at once, as the kubelet's swap."""
        self._generation += 1
        data = self.directory / f"..2026_12_04_{self._generation:04d}"
        data.mkdir()
        for key, value in values.items():
            (data / key).write_text(value + "\n")
        link = self.directory / "..data_tmp"
        link.symlink_to(data.name)
        os.replace(link, self.directory / "..data")
