"""Token ids scored by the compiled ``dataforge.lm._kenlm_ids`` (``make kenlm-ids``): the
same values as ``kenlm.Model.score`` on the rendered strings, to the bit."""

from __future__ import annotations

import os
import random
import threading
from pathlib import Path

import kenlm
import numpy as np
import pytest
from lm_testkit import DOCS_EN, NEWS_ZH, SpmTokenizer, read_fixture

from dataforge.lm import native
from dataforge.lm.score import PerplexityScorer
from dataforge.lm.tokens import CharRenderer, TokenRenderer


@pytest.fixture(scope="module")
def built() -> None:
    if not native.available():
        message = "dataforge/lm/_kenlm_ids is not built: run `make kenlm-ids` (`make test` does)"
        if os.environ.get("CI"):
            pytest.fail(message)  # `make test` builds it: missing in CI is a broken build
        pytest.skip(message)


def fixture_texts(rng: random.Random) -> list[str]:
    texts = [r["text"] for p in (NEWS_ZH, DOCS_EN) for r in read_fixture(p)]
    # Corruptions too: shuffled characters (unseen n-grams, back-off everywhere), empty
    # and whitespace-only documents, a line of one character.
    shuffled = ["".join(rng.sample(t, len(t))) for t in texts[:10]]
    return texts + shuffled + ["", " \n\t", "的", "a\n\nb"]


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_ids_scored_natively_equal_kenlm_strings(
    built: None, lang: str, zh_model: Path, en_model: Path, tokenizer: SpmTokenizer
) -> None:
    model = zh_model if lang == "zh" else en_model
    fast = PerplexityScorer(model, tokenizer)
    strings = PerplexityScorer(model, tokenizer, native=False)
    assert fast.ids is not None and strings.ids is None
    texts = fixture_texts(random.Random(7))
    a, b = fast.score_documents(texts), strings.score_documents(texts)
    assert np.array_equal(a.log10_prob, b.log10_prob)  # exact: same float sums
    assert np.array_equal(a.length, b.length)
    assert np.array_equal(a.ppl, b.ppl, equal_nan=True)
    assert np.isnan(a.ppl[-3]) and np.isnan(a.ppl[-4])  # "" and whitespace only


def test_line_scores_and_empty_lines(built: None, zh_model: Path, tokenizer: SpmTokenizer) -> None:
    scorer = PerplexityScorer(zh_model, tokenizer)
    lines = ["国务院总理今天会见了外国代表团.", "the zzqx ☃", "的"]
    ids, offsets = TokenRenderer(tokenizer).encode(lines)
    sentences, num_tokens = TokenRenderer(tokenizer).render(lines)
    got = scorer.ids.score(ids, offsets)
    assert got.tolist() == [scorer.model.score(s) for s in sentences]
    assert np.diff(offsets).tolist() == num_tokens.tolist()
    # A line of no tokens is p(</s> | <s>), as kenlm scores "".
    assert scorer.ids.score(np.zeros(0, np.int64), np.array([0, 0])).tolist() == [
        scorer.model.score("")
    ]
    assert scorer.ids.score(np.zeros(0, np.int64), np.array([0])).tolist() == []


def write_arpa(path: Path) -> None:
    """A bigram ARPA model over the words "0".."3" (the ids 0-3 of a tokenizer)."""
    path.write_text(
        "\\data\\\nngram 1=7\nngram 2=4\n\n\\1-grams:\n"
        "-1.0\t<unk>\t0\n-99\t<s>\t-0.5\n-0.8\t</s>\t0\n"
        "-0.6\t0\t-0.2\n-0.7\t1\t-0.3\n-0.9\t2\t-0.1\n-1.2\t3\t0\n\n"
        "\\2-grams:\n-0.1\t<s> 0\n-0.2\t0 1\n-0.3\t1 2\n-0.25\t2 </s>\n\n\\end\\\n",
        encoding="utf-8",
    )


class FixedIds:
    """A tokenizer stand-in whose "text" is the ids themselves, space-separated."""

    fingerprint = ""

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [[int(x) for x in t.split()] for t in texts]


def test_arpa_model_and_words_it_does_not_know(built: None, tmp_path: Path) -> None:
    arpa = tmp_path / "tiny.arpa"
    write_arpa(arpa)
    # ids 4 and 5 are not in the model: <unk>, as kenlm maps the strings "4" and "5"
    scorer = native.IdScorer(arpa, vocab_size=6)
    lines = ["0 1 2", "3 3 0", "4", "5 0 1", "2"]
    renderer = TokenRenderer(FixedIds(6))
    ids, offsets = renderer.encode(lines)
    model = kenlm.Model(str(arpa))
    expected = [model.score(s) for s in renderer.render(lines)[0]]
    assert scorer.score(ids, offsets).tolist() == expected
    # By hand: log10 p(0|<s>) + p(1|0) + p(2|1) + p(</s>|2) = -0.1 - 0.2 - 0.3 - 0.25
    assert expected[0] == pytest.approx(-0.85, abs=1e-6)


def test_bad_inputs_are_refused(built: None, tmp_path: Path) -> None:
    arpa = tmp_path / "tiny.arpa"
    write_arpa(arpa)
    scorer = native.IdScorer(arpa, vocab_size=6)
    with pytest.raises(ValueError, match=r"outside \[0, 6\): min 0, max 6"):
        scorer.score(np.array([0, 6]), np.array([0, 2]))
    with pytest.raises(ValueError, match=r"min -1"):
        scorer.score(np.array([-1]), np.array([0, 1]))
    with pytest.raises(ValueError, match="0 first and 2"):
        scorer.score(np.array([0, 1]), np.array([1, 2]))
    with pytest.raises(ValueError, match="0 first and 2"):
        scorer.score(np.array([0, 1]), np.array([0, 1]))
    with pytest.raises(ValueError, match="decrease at line 1"):
        scorer.score(np.array([0, 1]), np.array([0, 2, 1, 2]))
    # The extension itself checks what it reads: indexes outside KenLM's vocabulary, dtypes
    from dataforge.lm import _kenlm_ids

    out = np.empty(1)
    with pytest.raises(ValueError, match=r"outside the vocabulary \[0, 7\)"):
        _kenlm_ids.score(scorer._model, np.array([7], np.uint32), np.array([0, 1]), out)
    with pytest.raises(TypeError, match="indexes"):
        _kenlm_ids.score(scorer._model, np.array([1.0]), np.array([0, 1]), out)
    with pytest.raises(TypeError, match="out: need a 1-d contiguous writable array .* got list"):
        _kenlm_ids.score(scorer._model, np.array([1], np.uint32), np.array([0, 1]), [0.0])
    with pytest.raises(ValueError, match=r"offsets: need len\(out\) \+ 1 = 1 values, got 2"):
        _kenlm_ids.score(scorer._model, np.array([1], np.uint32), np.array([0, 1]), np.empty(0))
    with pytest.raises(TypeError, match="out: need a 1-d contiguous writable .* got bytes"):
        _kenlm_ids.score(scorer._model, np.array([1], np.uint32), np.array([0, 1]), b"\0" * 8)


def test_unreadable_models_name_the_file(built: None, tmp_path: Path) -> None:
    with pytest.raises(OSError, match=r"cannot read KenLM model .*missing\.bin"):
        native.IdScorer(tmp_path / "missing.bin", vocab_size=4)
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"mmap lm http://kheafield.com/code format version 5\0" + b"\0" * 64)
    with pytest.raises(OSError, match=r"junk\.bin"):
        native.IdScorer(junk, vocab_size=4)


def test_two_threads_score_at_once(built: None, zh_model: Path, tokenizer: SpmTokenizer) -> None:
    """The GIL is released while scoring: one model, two threads, the same results."""
    scorer = PerplexityScorer(zh_model, tokenizer)
    texts = [r["text"] for r in read_fixture(NEWS_ZH)] * 3
    expected = scorer.score_documents(texts).log10_prob
    results: list[np.ndarray] = []

    def work() -> None:
        for _ in range(3):
            results.append(scorer.score_documents(texts).log10_prob)

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 6 and all(np.array_equal(r, expected) for r in results)


def test_without_the_extension_strings_are_scored(
    zh_model: Path, tokenizer: SpmTokenizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(native, "_kenlm_ids", None)
    scorer = PerplexityScorer(zh_model, tokenizer)
    assert scorer.ids is None and not native.available()
    assert scorer.score_documents(["国务院总理今天会见了外国代表团。"]).length.tolist()[0] > 1
    with pytest.raises(RuntimeError, match="make kenlm-ids"):
        PerplexityScorer(zh_model, tokenizer, native=True)


def test_chars_segmentation_scores_strings(built: None, tmp_path: Path) -> None:
    arpa = tmp_path / "tiny.arpa"
    write_arpa(arpa)
    scorer = PerplexityScorer(arpa, CharRenderer(), native=True)
    assert scorer.ids is None  # characters have no ids: kenlm.Model.score on strings
    # CCNet normalization turns every digit into 0: "01" is scored as the tokens "0 0"
    assert scorer.score_documents(["01"]).log10_prob[0] == pytest.approx(
        kenlm.Model(str(arpa)).score("0 0")
    )


def test_scorers_of_one_file_share_the_loaded_model(
    built: None, tmp_path: Path, zh_model: Path, tokenizer: SpmTokenizer
) -> None:
    """Two ops of one process (the driver's two threads) hold the model once; a file
    changed on disk since is loaded again."""
    arpa = tmp_path / "tiny.arpa"
    write_arpa(arpa)
    a, b = native.IdScorer(arpa, vocab_size=6), native.IdScorer(arpa, vocab_size=4)
    assert a._model is b._model
    scores = a.score(np.array([0, 1, 2]), np.array([0, 3]))
    arpa.write_text(arpa.read_text().replace("-0.2\t0 1", "-0.4\t0 1"), encoding="utf-8")
    os.utime(arpa, ns=(1, 1))  # a different mtime whatever the clock's resolution
    c = native.IdScorer(arpa, vocab_size=6)
    assert c._model is not a._model
    assert c.score(np.array([0, 1, 2]), np.array([0, 3]))[0] == pytest.approx(scores[0] - 0.2)
    del a, b
    assert native.IdScorer(arpa, vocab_size=6)._model is c._model
    # scorers of the op share it too
    s1, s2 = PerplexityScorer(zh_model, tokenizer), PerplexityScorer(zh_model, tokenizer)
    assert s1.ids._model is s2.ids._model
