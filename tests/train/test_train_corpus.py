"""Corpus facts before training: documents, tokens, sha256, the share of newline tokens, and a
warning for hard-wrapped text (the adapter would learn the line breaks). No torch needed."""

from __future__ import annotations

import hashlib
import random
import textwrap
from array import array

import pytest

from fleetdeck.backend.train.corpus import ByteTokenizer, corpus_facts, describe_facts, hard_wrap

pytestmark = pytest.mark.train

WORDS = (
    "the of and to in is that for it as was with be by on not he this are or his from at which "
    "but have an they you were her she there been one all we their has would when if so"
).split()


def _paragraphs(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(40, 120))) + "." for _ in range(n)
    ]


def _encode(docs: list[str], tok: ByteTokenizer) -> array:
    flat = array("i")
    for d in docs:
        flat.extend(tok.encode(d))
        flat.append(tok.eos_id)
    return flat


def test_hard_wrapped_text_is_flagged_and_reflowed_text_is_not():
    paras = _paragraphs(30)
    wrapped = ["\n\n".join(textwrap.fill(p, 70) for p in paras[i : i + 5]) for i in range(0, 30, 5)]
    reflowed = ["\n\n".join(paras[i : i + 5]) for i in range(0, 30, 5)]
    wrap = hard_wrap(wrapped)
    assert wrap is not None and 60 <= wrap["width"] <= 70 and wrap["share"] >= 0.8
    assert hard_wrap(reflowed) is None
    tok = ByteTokenizer()
    facts = corpus_facts(wrapped, _encode(wrapped, tok), tok, "abc")
    assert facts["warnings"] and "hard-wrapped" in facts["warnings"][0]
    plain = corpus_facts(reflowed, _encode(reflowed, tok), tok, "abc")
    assert plain["warnings"] == [] and plain["hard_wrap"] is None
    # the wrapped corpus spends its line breaks on typography
    assert facts["newline_token_share"] > 3 * plain["newline_token_share"]


def test_facts_count_documents_tokens_and_newlines_exactly():
    docs = ["ab\ncd", "x\n\ny", "no newline"]
    tok = ByteTokenizer()
    facts = corpus_facts(docs, _encode(docs, tok), tok, hashlib.sha256(b"c").hexdigest())
    assert facts["documents"] == 3
    assert facts["tokens"] == 5 + 4 + 10 and facts["end_of_text_tokens"] == 3
    assert facts["newline_tokens"] == 3
    assert facts["newline_token_share"] == pytest.approx(3 / 19, abs=1e-5)
    line = describe_facts(facts)
    assert "3 documents, 19 tokens" in line and "newline tokens 3 (15.79%)" in line
