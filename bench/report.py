"""bench/results/*.json → docs/benchmarks.md (tables, targets met or missed) and PNG plots in docs/img/.

The page's prose and targets are bench/report.md.j2; this module reads the results, works out what the page states
(medians, differences, which rows), and renders it.

    python -m bench.report [--results DIR] [--docs DIR] [--no-plots]

regenerates the page from the results without running a benchmark (default bench/results → docs/)."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined

ROOT = Path(__file__).resolve().parent.parent
# The sections after 6, in the page's order; each is rendered from its result and what _derived() adds.
SECTIONS = ("hotpath", "workers", "scale", "engines", "identities", "access", "stages", "rerank", "connections",
            "existing", "traces", "mcp")
_MEDIAN_OF = {"p50_ms": "median_round_p50_ms", "rps": "median_round_rps",
              "service_cpu_ms_per_request": "median_round_cpu_ms_per_request"}


def _load(results: Path, name: str) -> dict[str, Any] | None:
    path = results / f"{name}.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def _verdict(ok: bool) -> str:
    return "**met**" if ok else "**missed**"


def _or_dash(value: Any) -> str:
    return "–" if value is None else f"{value:.4f}" if isinstance(value, float) else str(value)


def _each(values: Any, spec: str, separator: str = ", ") -> str:
    return separator.join(format(value, spec) for value in values)


def _cells(modes: dict[str, Any], label: str, key: str, digits: int) -> str:
    """A mode's median over interleaved rounds, every round's figure in brackets."""
    row = modes[label]
    return f"{row[_MEDIAN_OF[key]]:.{digits}f} ({', '.join(f'{r[key]:.{digits}f}' for r in row['rounds'])})"


def _ratios(median: float, rounds: list[float]) -> str:
    return f"{median:.2f} ({', '.join(f'{x:.2f}' for x in rounds)})"


def _median_of(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _environment() -> Environment:
    env = Environment(loader=FileSystemLoader(Path(__file__).parent), undefined=StrictUndefined, trim_blocks=True,
                      lstrip_blocks=True, keep_trailing_newline=True, autoescape=False)  # Markdown: nothing to escape
    env.filters.update(f=format, each=_each, verdict=_verdict, or_dash=_or_dash)
    env.globals.update(cells=_cells, ratios=_ratios, median=_median_of)
    return env


def _relevance(rel: dict[str, Any], images: Path, plots: bool) -> dict[str, Any]:
    """Section 6: the rows the page picks out of the result, and the reliability diagram."""
    time = rel["sets"].get("time", {})
    halves = None
    if "service_default_test_half" in time:
        halves = (time["whole_documents_test_half"]["ndcg_at_10"], time["service_default_test_half"]["ndcg_at_10"])
    tables = []
    for name, modes in rel["vector_sets"].items():
        tables += [(name, mode, row["calibration"]) for mode, row in modes.items()]
    tables += [(name, "bm25 (BM25-only base)", row["calibration_bm25"]) for name, row in rel["sets"].items()]
    tables += [(f"{name} (test half: even ids)", "bm25 (BM25-only base)", row["calibration_bm25_test_half"])
               for name, row in rel["sets"].items() if "calibration_bm25_test_half" in row]
    over_best_leg = {name: modes["hybrid"]["ndcg_at_10"] - max(modes["bm25"]["ndcg_at_10"], modes["vector"]["ndcg_at_10"])
                     for name, modes in rel["vector_sets"].items()}
    from bench import plots as figures

    return {"found": rel, "time_halves": halves, "tables": tables, "over_best_leg": over_best_leg,
            "labels": [alt["variant"] for alt in next(iter(rel["sets"].values()))["alternatives"]],
            "halves": [alt for alt in time.get("alternatives", []) if "train_half" in alt],
            "plot": figures.reliability(images, tables) if plots else None}


def _derived(name: str, found: dict[str, Any]) -> dict[str, Any]:
    """What a section after 6 states beyond its result's own figures."""
    if name == "workers":
        floors = {label: row for label, row in found.items() if label.startswith("floor")}
        cheapest = min((row["service_cpu_ms_per_request"] for row in floors.values()), default=0.0)
        one = found.get("workers 1 c32", {}).get("service_cpu_ms_per_request", math.nan)
        return {"floors": floors, "over_floor": one / cheapest if cheapest else math.nan}  # a smoke run's may read 0
    if name == "engines":
        return {"worst": max([0.0, *(abs(v) for row in found["engines"].values()
                                     for v in row["ndcg_difference_to_opensearch"].values())])}
    if name == "identities":
        return {"straddles": all(min(v) <= 1 <= max(v) for v in found["store_over_file"]["per_round"].values())}
    return {}


def render(results: Path, docs: Path, *, plots: bool = True) -> Path:
    """docs/benchmarks.md from the results; `plots`: also the PNG figures (matplotlib, requirements-bench.lock)."""
    quality, latency, ingest, acl, semantic, relevance = (
        _load(results, n) for n in ("quality", "latency", "ingest", "acl", "semantic", "relevance"))
    any_result = quality or latency or ingest or acl or semantic or relevance
    info = any_result["machine"] if any_result else {}
    images: list[str] = []
    if plots:
        from bench import plots as figures

        images = figures.figures(docs / "img", quality, latency, ingest, acl)
    sections = {}
    for name in SECTIONS:
        found = _load(results, name)
        if found:
            found.pop("machine", None)
            sections[name] = {"found": found, **_derived(name, found)}
    page = _environment().get_template("report.md.j2").render(
        info=info, packages=", ".join(f"{k} {v}" for k, v in info.get("packages", {}).items() if v),
        quality=quality, latency=latency, ingest=ingest, acl=acl, semantic=semantic,
        relevance=_relevance(relevance, docs / "img", plots) if relevance else None,
        sections=sections, images=images)
    out = docs / "benchmarks.md"
    docs.mkdir(parents=True, exist_ok=True)
    out.write_text(page.removesuffix("\n"), encoding="utf-8")  # the page's lines, joined: no newline after the last
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--docs", type=Path, default=ROOT / "docs")
    parser.add_argument("--no-plots", dest="plots", action="store_false", help="the page alone, no PNG figures")
    args = parser.parse_args()
    print(render(args.results, args.docs, plots=args.plots))


if __name__ == "__main__":
    main()
