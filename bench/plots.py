"""docs/benchmarks.md's figures: PNG plots in docs/img/ from the results (bench/report.py puts them on the page)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def figures(images: Path, quality: Any, latency: Any, ingest: Any, acl: Any) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    images.mkdir(parents=True, exist_ok=True)
    made = []
    if latency:
        levels = latency["levels"]
        xs = [str(level["concurrency"]) for level in levels]
        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
        positions = list(range(len(xs)))
        for offset, (mode, colour) in zip((-0.2, 0.2), (("direct", "tab:blue"), ("service", "tab:orange")),
                                          strict=True):
            for pct, style in (("p50_ms", "-"), ("p99_ms", "--")):
                left.plot(xs, [level[mode][pct] for level in levels], style, color=colour, marker="o",
                          label=f"{mode} {pct[:3]}")
            right.bar([p + offset for p in positions], [level[mode]["rps"] for level in levels], width=0.4,
                      color=colour, label=mode)
        right.set_xticks(positions, xs)
        left.set_xlabel("concurrency")
        left.set_ylabel("latency (ms)")
        left.legend(fontsize=8)
        left.set_title("Latency: direct vs through the service")
        right.set_xlabel("concurrency")
        right.set_ylabel("requests/s")
        right.set_title("Throughput")
        right.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(images / "latency.png", dpi=110)
        plt.close(fig)
        made.append("latency.png")
    bars = []
    if quality:
        bars.append(("nDCG@10", quality["ndcg_at_10"], quality["reference_ndcg_at_10"]))
        bars.append(("Recall@100", quality["recall_at_100"], None))
    if bars:
        fig, axis = plt.subplots(figsize=(5, 3.2))
        axis.bar([b[0] for b in bars], [b[1] for b in bars], color="tab:green")
        for i, (_, value, reference) in enumerate(bars):
            axis.text(i, value + 0.01, f"{value:.3f}", ha="center")
            if reference:
                axis.hlines(reference, i - 0.4, i + 0.4, colors="black", linestyles="dashed")
        axis.set_ylim(0, 1.05)
        axis.set_title("SciFact (BM25); dashed: BEIR Elasticsearch 0.665")
        fig.tight_layout()
        fig.savefig(images / "quality.png", dpi=110)
        plt.close(fig)
        made.append("quality.png")
    if ingest or acl:
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
        if ingest:
            axes[0].bar(["naive helpers.bulk", "es-provider ingest"], [ingest["naive_median"], ingest["ours_median"]],
                        color=["tab:gray", "tab:orange"])
            axes[0].set_ylabel("chunks/s")
            axes[0].set_title(f"Ingest rate (×{ingest['ratio']})")
        if acl:
            names = ["service off", "service on", "direct off", "direct on"]
            keys = ["service_filters_off", "service_filters_on", "direct_filters_off", "direct_filters_on"]
            axes[1].bar(names, [acl[k]["p50_ms"] for k in keys], color=["tab:gray", "tab:orange"] * 2)
            axes[1].set_ylabel("p50 latency (ms)")
            axes[1].set_title("Permission filters off vs on")
        fig.tight_layout()
        fig.savefig(images / "ingest_acl.png", dpi=110)
        plt.close(fig)
        made.append("ingest_acl.png")
    return made


def reliability(images: Path, tables: list[tuple[str, str, dict[str, Any]]]) -> str | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    images.mkdir(parents=True, exist_ok=True)
    fig, axis = plt.subplots(figsize=(5.5, 4.5))
    axis.plot([0, 1], [0, 1], ":", color="grey", label="perfect")
    for name, mode, cal in tables:
        if not cal["bins"]:
            continue
        axis.plot([b["mean_score"] for b in cal["bins"]], [b["relevant_share"] for b in cal["bins"]], marker="o",
                  label=f"{name} {mode.split(' ')[0]}")
    axis.set_xlabel("score (mean in bin)")
    axis.set_ylabel("share relevant")
    axis.set_title("Reliability: top-10 items, 10 bins")
    axis.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(images / "calibration.png", dpi=110)
    plt.close(fig)
    return "calibration.png"
