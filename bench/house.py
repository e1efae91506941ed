"""The house (issue 38) against the hot path: the service's CPU per request before and after the restructuring,
side by side in one run.

    python -m bench.house [--before REV] [--rounds N] [--data PATH] [--result NAME] [--url URL] [--results DIR]
    python -m bench.house --smoke [--url URL] [--results DIR]

Both checkouts serve the same config from the same virtualenv on the same node (REV in a git worktree of its own;
`python -m` runs the checkout it starts in). Rounds interleave (before, after, after, before, …); each measures a
SparkTide callback and a Dify retrieval at concurrency 32 (2,400 requests after 200 of warm-up) and reads the serving
process's CPU from /proc. Writes bench/results/house.json (or NAME.json) and prints every round. Also: traces off
against the build before the tracing code (`--before 2dd8611^ --result traces-off`, issue 41). A smoke run
(`make test`) compares this checkout with itself, at a tiny size on made-up data: no old revision, no worktree.
"""

from __future__ import annotations

import argparse
import math
import statistics
import subprocess
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench import scifact
from bench.bodies import MAIN, callback
from bench.common import (
    API_KEY,
    RESULTS,
    ROOT,
    SECRET,
    as_smoke_run,
    cli,
    config_text,
    loadgen,
    machine,
    sized,
    smoke,
    start_opensearch,
    write_result,
)
from harness.served import Served

BEFORE = "618e8e81aa52c0b8f4d760429ad784dbb4b379fa"  # main before issue 38's rooms and adapters
REQUESTS, WARMUP, CONCURRENCY = *sized((2400, 200), (32, 4)), 32


def _serve(config: Path, url: str, checkout: Path, log: Path) -> Any:
    return Served(config, {"OPENSEARCH_URL": url, "BENCH_SECRET": SECRET, "BENCH_API_KEY": API_KEY}, log,
                  cwd=checkout)


def _round(svc: Any, spec: dict[str, Any]) -> dict[str, float]:
    before = svc.cpu_seconds()
    answer = loadgen({"mode": "service", "concurrency": CONCURRENCY, "requests": REQUESTS, "warmup": WARMUP, **spec})
    if answer["errors"]:
        raise SystemExit(f"{answer['errors']} errors against {spec['target']}")
    return {"cpu_ms_per_request": (svc.cpu_seconds() - before) / (REQUESTS + WARMUP) * 1000,
            "rps": len(answer["latencies_ms"]) / answer["elapsed_s"]}


def summary(rounds: dict[str, dict[str, list[dict[str, float]]]]) -> dict[str, Any]:
    """Per workload: the after/before ratio of each round (the two ran back to back) and their median."""
    out: dict[str, Any] = {}
    for workload, sides in rounds.items():
        # A smoke run's tiny load may read no CPU at all: NaN then, not a division by zero.
        ratios = [a["cpu_ms_per_request"] / b["cpu_ms_per_request"] if b["cpu_ms_per_request"] else math.nan
                  for a, b in zip(sides["after"], sides["before"], strict=True)]
        out[workload] = {"cpu_ratio_after_over_before_per_round": [round(r, 3) for r in ratios],
                         "cpu_ratio_median": round(statistics.median(ratios), 3)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", default=BEFORE)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--data", type=Path, default=scifact.DEFAULT_DATA)
    parser.add_argument("--result", default="house", help="bench/results/<RESULT>.json")
    parser.add_argument("--url", help="the engine node to use (default: scripts/opensearch-local starts one)")
    parser.add_argument("--results", type=Path, help="where <RESULT>.json goes (default bench/results)")
    parser.add_argument("--smoke", action="store_true", help="this checkout against itself, one tiny round on "
                        "made-up data (bench/smoke.py), into a new temporary folder unless --results")
    args = parser.parse_args()
    as_smoke_run("bench.house", args.smoke)
    work = Path(tempfile.mkdtemp(prefix="es-provider-house-"))
    folder = args.results or (work / "results" if smoke() else RESULTS)
    if smoke():
        from bench import smoke as tiny

        args.data, args.rounds, args.before = tiny.write_sets(work / "data"), 1, "HEAD (this checkout: a smoke run)"
    url = args.url.rstrip("/") if args.url else start_opensearch()
    old = ROOT if smoke() else work / "before"
    if old != ROOT:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(old), args.before], check=True,
                       capture_output=True)
    try:
        config = work / "config.toml"
        config.write_text(config_text(url, [MAIN], ["scifact"]))
        records = work / "scifact.jsonl"
        scifact.write_records(args.data, records)
        cli("kb", "create", "--config", str(config), "--kb", MAIN["id"], "--exist-ok", url=url)
        cli("ingest", "--config", str(config), "--kb", MAIN["id"], str(records), url=url)
        queries = list(scifact.test_queries(args.data)[0].values())
        workloads = {
            "sparktide c32": lambda base: {"target": f"{base}/agent/knowledge/{MAIN['id']}/1", "secret": SECRET,
                                           "bodies": [callback(MAIN["id"], q) for q in queries]},
            "dify c32": lambda base: {"target": f"{base}/retrieval", "secret": API_KEY, "protocol": "agentarts",
                                      "bodies": [{"knowledge_id": MAIN["id"], "query": q,
                                                  "retrieval_setting": {"top_k": 10}} for q in queries]},
        }
        rounds: dict[str, dict[str, list[dict[str, float]]]] = {w: {"before": [], "after": []} for w in workloads}
        with ExitStack() as stack:
            served = {side: _serve(config, url, checkout, work / f"{side}.log")
                      for side, checkout in (("before", old), ("after", ROOT))}
            for svc in served.values():
                stack.callback(svc.stop)
            for n in range(args.rounds):
                order = ("before", "after") if n % 2 == 0 else ("after", "before")
                for workload, spec in workloads.items():
                    for side in order:
                        row = _round(served[side], spec(served[side].base))
                        rounds[workload][side].append(row)
                        print(f"round {n + 1} {workload:14} {side:6} {row['cpu_ms_per_request']:.3f} ms CPU/request"
                              f"  {row['rps']:.0f} rps", flush=True)
        out: dict[str, Any] = {"machine": machine(url), "before": args.before, "rounds": rounds}
        out.update(summary(rounds))
        for workload in rounds:
            print(f"{workload}: after/before CPU per request, per round "
                  f"{out[workload]['cpu_ratio_after_over_before_per_round']}, median {out[workload]['cpu_ratio_median']}")
        write_result(args.result, out, folder)
    finally:
        if old != ROOT:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old)], capture_output=True)


if __name__ == "__main__":
    main()
