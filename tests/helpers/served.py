"""The tests' served configs (a knowledge base entry, a config file) beside the served-process launcher and load
generator runner they share with bench/ (harness/served.py, imported here so the tests find them with the rest)."""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import orjson

from harness.served import Served, cpu_seconds, free_port, run_loadgen, wait_until_answering

__all__ = ["Served", "cpu_seconds", "free_port", "kb_entry", "p99", "post", "run_loadgen", "toml_value",
           "wait_until_answering", "write_config"]


def post(base: str, path: str, body: dict[str, Any] | bytes, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    """A served process's status and JSON answer to one POST (an error status answers too)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(request, timeout=20) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def toml_value(value: Any) -> str:
    return orjson.dumps(value).decode()


def kb_entry(alias: str, **changes: Any) -> dict[str, Any]:
    """The project-documents knowledge base of a served config (tests/helpers/setup.py's secrets), with `changes`."""
    entry = {"id": "project-documents", "name": "Project documents", "versions": ["1.0.0"], "alias": alias,
             "mandatory_filters": ["TENANT", "SUBJECT"], "top_k": 5, "secret_ref": "TEST_CALLBACK_KEY",
             "apps": ["app-1"]}
    entry.update(changes)
    return entry


def write_config(path: Path, url: str, knowledge: list[dict[str, Any]], *, api_keys: list[dict[str, Any]] = (),
                 principals: dict[str, list[str]] | None = None, server: dict[str, Any] | None = None,
                 embedders: dict[str, dict[str, Any]] | None = None,
                 sections: dict[str, dict[str, Any]] | None = None) -> Path:
    """`sections`: further tables by name (e.g. "scim", "directory"), each written as given; a value that is a list
    of tables is written as an array of tables (`"mcp": {"issuers": [{...}]}` → `[[mcp.issuers]]`)."""
    lines = ["[opensearch]", f"url = {toml_value(url)}", "", "[server]"]
    lines += [f"{k} = {toml_value(v)}" for k, v in (server or {}).items()]
    for name, table in (sections or {}).items():
        tables = {k: v for k, v in table.items() if isinstance(v, list) and v and all(isinstance(e, dict) for e in v)}
        lines += ["", f"[{name}]"] + [f"{k} = {toml_value(v)}" for k, v in table.items() if k not in tables]
        for key, entries in tables.items():  # a list of tables: [[name.key]] each (e.g. [[mcp.issuers]])
            for entry in entries:
                lines += ["", f"[[{name}.{key}]]"] + [f"{k} = {toml_value(v)}" for k, v in entry.items()]
    for name, embedder in (embedders or {}).items():
        lines += ["", f"[embedders.{name}]"] + [f"{k} = {toml_value(v)}" for k, v in embedder.items()]
    for kb in knowledge:
        lines += ["", "[[knowledge]]"] + [f"{k} = {toml_value(v)}" for k, v in kb.items()]
    for key in api_keys:
        lines += ["", "[[api_keys]]"] + [f"{k} = {toml_value(v)}" for k, v in key.items()]
    lines += ["", "[principals]"] + [f"{toml_value(k)} = {toml_value(v)}" for k, v in (principals or {}).items()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]
