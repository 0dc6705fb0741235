# Copyright: aic.stack contributors
# Apache-2.0
"""Prompts of an exact token count: a word-based builder driven by the served model's tokenizer
(``/tokenize``), per-client or shared prefixes.
"""

from __future__ import annotations

import random
from collections import namedtuple

from ansible_collections.aic.stack.plugins.plugin_utils.cliff.profiles import PREFIX_MODES, CliffConfigError


class PromptBuildError(ValueError):
    """The tokenizer cannot be driven to the exact token count asked for."""


PANGRAM = "The quick brown fox jumps over the lazy dog while five boxing wizards jump quickly"
NATO = [
    "alfa",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliett",
    "kilo",
    "lima",
    "mike",
    "november",
    "oscar",
    "papa",
    "quebec",
    "romeo",
    "sierra",
    "tango",
    "uniform",
    "victor",
    "whiskey",
    "xray",
    "yankee",
    "zulu",
]
VOCABULARY = tuple(
    (
        PANGRAM.lower() + " " + " ".join(NATO) + " amber basalt cobalt dune ember fjord granite harbor iris jade kelp "
        "lagoon meadow nickel onyx prairie quartz river summit tundra umber valley willow zenith"
    ).split()
)
# Words that are a single token for most tokenizers: used to top up the last one or two tokens.
FILLERS = ("a", "the", "of", "and", "to", "in", "is", "x", "1", ".")
QUESTION = "\n\nQ: "
ANSWER = "\nA: "


def _count(encode, text):
    return len(encode(text))


def fit_words(encode, head, words, target, tail=""):
    """``head + " ".join(words[:k]) [+ fillers] + tail`` with exactly ``target`` tokens under ``encode``.

    Finds the largest ``k`` that does not overshoot (galloping from a ratio estimate, then bisection), then tops
    up one token at a time with :data:`FILLERS`. ``words`` is an infinite-enough callable ``words(k)`` or a
    sequence. Raises :class:`PromptBuildError` when ``head + tail`` alone is longer than ``target`` or no filler
    makes the count exact.
    """
    take = words if callable(words) else (lambda k: list(words[:k]))

    def text_for(k, extra=()):
        body = " ".join(list(take(k)) + list(extra))
        if head and body and not head[-1].isspace():
            body = " " + body
        return head + body + tail

    def count(k, extra=()):
        return _count(encode, text_for(k, extra))

    base = count(0)
    if base > target:
        raise PromptBuildError(f"head/tail alone are {base} tokens, more than the {target} asked for")
    if base == target:
        return text_for(0)
    # Gallop: lo fits (<= target), hi overshoots (> target).
    lo, hi = 0, max(1, target - base)
    while count(hi) <= target:
        lo, hi = hi, hi * 2
        if hi > 16 * (target + 1):
            raise PromptBuildError("the word source does not add tokens")
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if count(mid) <= target:
            lo = mid
        else:
            hi = mid
    extra = []
    current = count(lo)
    while current < target:
        for filler in FILLERS:
            n = count(lo, extra + [filler])
            if n == current + 1 or n == target:
                extra.append(filler)
                current = n
                break
        else:
            raise PromptBuildError(f"cannot reach exactly {target} tokens (stuck at {current})")
    return text_for(lo, extra)


def _word_source(rng, vocabulary=VOCABULARY):
    cache = []

    def take(k):
        while len(cache) < k:
            cache.append(rng.choice(vocabulary))
        return cache[:k]

    return take


def _shared_words():
    pangram = PANGRAM.split()

    def take(k):
        return [pangram[i % len(pangram)] for i in range(k)]

    return take


PromptSet = namedtuple("PromptSet", "prompts prefixes prompt_tokens prefix_tokens")


class WordPromptBuilder:
    """Prompts of exact token counts from words, for any tokenizer callable ``encode(str) -> list[int]``.

    * ``shared``: every client gets the same pangram prefix;
    * ``per_client``: client ``i`` gets a unique front anchor ``"{i}-{i*99991+7}-session:"`` followed by a seeded
      shuffle of the vocabulary, so prefixes differ from the first token on.

    Each prompt is ``prefix + "\\n\\nQ: " + unique suffix + "\\nA: "``; the suffix starts with ``run_id`` and the
    client index, so no two requests share more than the prefix. Prefixes are cached per client.
    """

    def __init__(self, encode, seed=0):
        self.encode = encode
        self.seed = seed
        self._prefixes = {}

    def prefix(self, mode, client, n_tokens):
        if mode not in PREFIX_MODES:
            raise CliffConfigError(f"prefix_mode: {mode!r} is not one of {', '.join(PREFIX_MODES)}")
        key = (mode, 0 if mode == "shared" else client, n_tokens)
        if key not in self._prefixes:
            if mode == "shared":
                text = fit_words(self.encode, "", _shared_words(), n_tokens)
            else:
                rng = random.Random(f"{self.seed}-prefix-{client}")
                vocab = list(VOCABULARY)
                rng.shuffle(vocab)
                anchor = f"{client}-{client * 99991 + 7}-session:"
                text = fit_words(self.encode, anchor, _word_source(rng, vocab), n_tokens)
            self._prefixes[key] = text
        return self._prefixes[key]

    def prompt(self, mode, client, prefix_tokens, isl, run_id=0):
        prefix = self.prefix(mode, client, prefix_tokens)
        anchor = f"{QUESTION}{run_id}-{client}:"
        # Fit the short suffix on its own (cheap with a remote tokenizer), then check the whole prompt; fall back
        # to fitting the whole prompt when the tokenizer merges across the prefix/suffix boundary.
        rng = random.Random(f"{self.seed}-suffix-{run_id}-{client}")
        try:
            suffix = fit_words(self.encode, anchor, _word_source(rng, NATO), isl - prefix_tokens, tail=ANSWER)
        except PromptBuildError:
            suffix = None
        if suffix is not None and _count(self.encode, prefix + suffix) == isl:
            return prefix, prefix + suffix
        rng = random.Random(f"{self.seed}-suffix-{run_id}-{client}")
        return prefix, fit_words(self.encode, prefix + anchor, _word_source(rng, NATO), isl, tail=ANSWER)

    def build(self, mode, n_clients, prefix_tokens, isl, run_id=0):
        """A :class:`PromptSet` of ``n_clients`` prompts of exactly ``isl`` tokens (prefix: ``prefix_tokens``)."""
        prefixes, prompts = [], []
        for client in range(n_clients):
            prefix, prompt = self.prompt(mode, client, prefix_tokens, isl, run_id)
            prefixes.append(prefix)
            prompts.append(prompt)
        return PromptSet(prompts, prefixes, [isl] * n_clients, prefix_tokens)


def vllm_tokenizer(base_url, model, session=None, timeout=60.0):
    """A tokenizer callable backed by vLLM's ``POST /tokenize`` (no special tokens): the served model's own."""
    import requests

    sess = session or requests.Session()
    url = base_url.rstrip("/") + "/tokenize"

    def encode(text):
        resp = sess.post(url, json={"model": model, "prompt": text, "add_special_tokens": False}, timeout=timeout)
        resp.raise_for_status()
        return list(resp.json()["tokens"])

    return encode
