"""The smoke run's data: three tiny sets in the BEIR layout, shaped like SciFact (short English abstracts, test and
train judgments), TIME (long English articles, numbered queries split odd/even) and DRCD (Chinese passages, test and
dev judgments), made up here so that a smoke run (`python -m bench.run --smoke`, `make test`) needs no data set and no
time to embed one. Each topic has its own words; a query asks for a topic and every document of it is relevant. The
numbers a smoke run writes mean nothing: it shows that each section runs and writes its result's shape."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path

Maker = Callable[[random.Random, tuple[str, ...]], str]  # a topic's words → a text (title or body)

ENGLISH = [
    ("glacier", "moraine", "icefield", "meltwater", "crevasse", "permafrost"),
    ("enzyme", "substrate", "catalysis", "kinase", "inhibitor", "phosphate"),
    ("vaccine", "antibody", "immunity", "antigen", "booster", "adjuvant"),
    ("neuron", "synapse", "dendrite", "axon", "cortex", "plasticity"),
    ("tumour", "metastasis", "oncogene", "biopsy", "chemotherapy", "carcinoma"),
    ("bacteria", "microbiome", "probiotic", "pathogen", "colony", "flagellum"),
    ("insulin", "glucose", "pancreas", "diabetes", "glycogen", "metabolism"),
    ("protein", "folding", "chaperone", "peptide", "residue", "conformation"),
    ("virus", "capsid", "replication", "genome", "host", "envelope"),
    ("cholesterol", "artery", "plaque", "lipid", "statin", "cardiac"),
    ("sleep", "circadian", "melatonin", "insomnia", "rhythm", "hypothalamus"),
    ("bone", "osteoporosis", "calcium", "fracture", "marrow", "cartilage"),
]
CHINESE = [
    ("天气", "气温", "降雨", "台风", "云层", "季节"),
    ("经济", "市场", "价格", "贸易", "银行", "投资"),
    ("历史", "朝代", "皇帝", "战争", "文物", "古城"),
    ("音乐", "歌曲", "乐器", "演唱", "旋律", "乐团"),
    ("体育", "比赛", "球队", "冠军", "运动员", "训练"),
    ("医学", "医院", "疾病", "药物", "治疗", "医生"),
    ("教育", "学校", "学生", "老师", "课程", "考试"),
    ("科技", "电脑", "软件", "网络", "手机", "芯片"),
    ("交通", "铁路", "公路", "机场", "港口", "地铁"),
    ("农业", "稻米", "小麦", "农民", "灌溉", "收成"),
]
FILLER = ("the", "study", "results", "shows", "effect", "measured", "patients", "group", "analysis", "during")


def _english(rng: random.Random, words: tuple[str, ...], length: int) -> str:
    return " ".join(rng.choice(words + FILLER) for _ in range(length)).capitalize() + "."


def _chinese(rng: random.Random, words: tuple[str, ...], sentences: int) -> str:
    return "".join(f"{rng.choice(words)}与{rng.choice(words)}的关系影响了{rng.choice(words)}。" for _ in range(sentences))


def _write(folder: Path, corpus: list[dict[str, str]], queries: dict[str, str],
           splits: dict[str, dict[str, list[str]]]) -> Path:
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps(doc, ensure_ascii=False) + "\n" for doc in corpus),
                                         encoding="utf-8")
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}, ensure_ascii=False) + "\n"
                                                  for q, t in queries.items()), encoding="utf-8")
    for split, judged in splits.items():
        rows = "".join(f"{q}\t{doc}\t1\n" for q, docs in judged.items() for doc in docs)
        (folder / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\n" + rows, encoding="utf-8")
    return folder


def _set(folder: Path, topics: list[tuple[str, ...]], per_topic: int, text: Maker, title: Maker,
         splits: tuple[str, ...], seed: int) -> Path:
    """`per_topic` documents a topic; per split, one query a topic (numbered 1, 2, ... across the splits)."""
    rng = random.Random(seed)
    corpus = [{"_id": str(100 + t * per_topic + n), "title": title(rng, words), "text": text(rng, words)}
              for t, words in enumerate(topics) for n in range(per_topic)]
    queries: dict[str, str] = {}
    judged: dict[str, dict[str, list[str]]] = {split: {} for split in splits}
    for s, split in enumerate(splits):
        for t, words in enumerate(topics):
            query = str(1 + s * len(topics) + t)
            queries[query] = " ".join(rng.sample(words, 3))
            judged[split][query] = [str(100 + t * per_topic + n) for n in range(per_topic)]
    return _write(folder, corpus, queries, judged)


def _title(rng: random.Random, words: tuple[str, ...]) -> str:
    return " ".join(rng.sample(words, 2)).title()


def write_sets(root: Path) -> Path:
    """scifact/, time_magazine/ and drcd/ under `root`; the SciFact-shaped folder (what --data names)."""
    _set(root / "time_magazine", ENGLISH, 2, lambda rng, words: " ".join(_english(rng, words, 40) for _ in range(8)),
         _title, ("test",), seed=2)
    _set(root / "drcd", CHINESE, 4, lambda rng, words: _chinese(rng, words, 6), lambda rng, words: rng.choice(words),
         ("test", "dev"), seed=3)
    return _set(root / "scifact", ENGLISH, 4, lambda rng, words: _english(rng, words, 60), _title,
                ("test", "train"), seed=1)


def evaluate(qrels: dict[str, dict[str, int]], run: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """ndcg_cut_10 and recall_100 per query, as trec_eval defines them: what bench/scifact.py asks pytrec_eval for,
    for a smoke run on a machine without it (`make test` installs requirements.lock only; pytrec-eval-terrier is in
    requirements-bench.lock)."""
    import math

    out = {}
    for qid, gains in qrels.items():
        ranked = sorted(run[qid].items(), key=lambda item: -item[1])
        dcg = sum(gains.get(doc, 0) / math.log2(rank + 2) for rank, (doc, _) in enumerate(ranked[:10]))
        ideal = sum(g / math.log2(rank + 2) for rank, g in enumerate(sorted(gains.values(), reverse=True)[:10]))
        relevant = {doc for doc, g in gains.items() if g > 0}
        found = sum(1 for doc, _ in ranked[:100] if doc in relevant)
        out[qid] = {"ndcg_cut_10": dcg / ideal if ideal else 0.0,
                    "recall_100": found / len(relevant) if relevant else 0.0}
    return out
