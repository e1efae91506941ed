"""Long documents for the passage tests and measurements (issue 52, finding 7): deterministic text of the shape an
existing index keeps whole — Traditional Chinese sentences drawn from common characters (Zipf-weighted), and English
sentences of common and rarer words — with a paragraph break now and then."""

from __future__ import annotations

import itertools
import random

# Common Traditional Chinese characters, most frequent first.
COMMON = (
    "的一是不了在人有我他這個們中來上大為和國地到以說時要就出會可也你對生能而子那得於著下自之年過發後作裡用道行所然"
    "家種事成方多經麼去法學如都同現當沒動面起看定天分還進好小部其些主樣理心她本前開但因只從想實日軍者意無力它與長把機"
    "十民第公此已工使情明性知全三又關點正業外將兩高間由問很最重並物手應戰向頭文體政美相見被利什二等產或新己制身果加西"
    "斯月話合回特代內信表化老給世位次度門任常先海通教兒原東聲提立及比員解水名真論處走義各入幾口認條平系氣題活爾更別打"
    "女變四神總何電數安少報才結反受目太量再感建務做接必場件計管期市直德資命山金指克許統區保至隊形社便空決治展馬科司五"
    "基眼書非則聽白卻界達光放強即像難且權思王象完設式色路記南品住告類求據程北邊死張該交規萬取拉格望覺術領共確傳師觀清"
)
# A question a user may ask (Dify passes the user's words): 41 distinct characters, 26 of them in COMMON.
CJK_QUESTION = "請問今年颱風警報什麼時候發布以及政府的防災準備工作是否已經完成了呢我們應該注意什麼事情"
_WORDS = ("the of and to in is was for on that with as by at from his an were are which this be has or had it not first "
         "their its also after new two who one been they her have report budget quarter season "
         "river bridge station council annual plan water power line north south")
WORDS = _WORDS.split()


def cjk_text(chars: int, seed: int = 7) -> str:
    rng = random.Random(seed)
    weights = list(itertools.accumulate(1 / (rank + 1) for rank in range(len(COMMON))))
    parts: list[str] = []
    total = 0
    while total < chars:
        sentence = "".join(rng.choices(COMMON, cum_weights=weights, k=rng.randint(8, 30))) + rng.choice("，。。！？；")
        if rng.random() < 0.05:
            sentence += "\n\n"
        parts.append(sentence)
        total += len(sentence)
    return "".join(parts)[:chars]


def english_text(chars: int, seed: int = 7) -> str:
    rng = random.Random(seed)
    vocabulary = WORDS + [f"term{n}" for n in range(5000)]
    weights = list(itertools.accumulate(1 / (rank + 1) for rank in range(len(vocabulary))))
    parts: list[str] = []
    total = 0
    while total < chars:
        sentence = " ".join(rng.choices(vocabulary, cum_weights=weights, k=rng.randint(6, 25))).capitalize() + ". "
        if rng.random() < 0.05:
            sentence += "\n\n"
        parts.append(sentence)
        total += len(sentence)
    return "".join(parts)[:chars]
