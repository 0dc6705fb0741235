"""Prompt builder: exact token counts, shared vs per-client prefixes, unique suffixes."""

from __future__ import annotations

import pytest

from ansible_collections.aic.stack.plugins.plugin_utils.cliff import profiles, prompts


def test_test_tokenizer_is_multi_token_for_long_words(test_tokenizer):
    assert len(test_tokenizer("a bb")) == 2
    assert len(test_tokenizer("foxtrot-uniform")) == 2  # 15 bytes: two pieces


@pytest.mark.parametrize("n_tokens", [3, 4, 64, 333, 2048])
def test_fit_words_is_exact(test_tokenizer, n_tokens):
    text = prompts.fit_words(test_tokenizer, "17-1699854-session:", list(prompts.VOCABULARY) * 200, n_tokens)
    assert len(test_tokenizer(text)) == n_tokens


def test_fit_words_tops_up_with_fillers(test_tokenizer):
    # Every word costs 2 tokens: an odd target needs a one-token filler.
    words = ["abcdefghijk"] * 100
    text = prompts.fit_words(test_tokenizer, "", words, 11)
    assert len(test_tokenizer(text)) == 11


def test_fit_words_head_too_long(test_tokenizer):
    with pytest.raises(prompts.PromptBuildError, match="more than the 2 asked for"):
        prompts.fit_words(test_tokenizer, "one two three", prompts.VOCABULARY, 2)


def test_per_client_prefixes_differ_and_are_exact(test_tokenizer):
    builder = prompts.WordPromptBuilder(test_tokenizer, seed=3)
    ps = builder.build("per_client", 8, prefix_tokens=300, isl=340, run_id=1)
    assert len(set(ps.prefixes)) == 8
    # Distinct from the first token on (unique front anchor), not just somewhere in the middle.
    assert len({test_tokenizer(p)[0] for p in ps.prefixes}) == 8
    for prefix, prompt in zip(ps.prefixes, ps.prompts, strict=True):
        assert len(test_tokenizer(prefix)) == 300
        assert len(test_tokenizer(prompt)) == 340
        assert prompt.startswith(prefix + prompts.QUESTION)
        assert prompt.endswith(prompts.ANSWER)
        assert test_tokenizer(prompt)[:300] == test_tokenizer(prefix)
    assert ps.prompt_tokens == [340] * 8


def test_shared_prefix_identical(test_tokenizer):
    builder = prompts.WordPromptBuilder(test_tokenizer)
    ps = builder.build("shared", 5, prefix_tokens=256, isl=300, run_id=0)
    assert len(set(ps.prefixes)) == 1
    assert len(test_tokenizer(ps.prefixes[0])) == 256
    # ... but every prompt is unique (suffix carries run id and client index).
    assert len(set(ps.prompts)) == 5
    assert all(len(test_tokenizer(p)) == 300 for p in ps.prompts)


def test_prompts_are_deterministic_and_unique_per_run(test_tokenizer):
    a = prompts.WordPromptBuilder(test_tokenizer, seed=1).build("per_client", 3, 100, 120, run_id=5)
    b = prompts.WordPromptBuilder(test_tokenizer, seed=1).build("per_client", 3, 100, 120, run_id=5)
    c = prompts.WordPromptBuilder(test_tokenizer, seed=1).build("per_client", 3, 100, 120, run_id=6)
    assert a == b
    assert a.prefixes == c.prefixes  # the same client keeps its prefix across iterations (so it can hit)
    assert not set(a.prompts) & set(c.prompts)


def test_boundary_merging_tokenizer_falls_back_to_whole_prompt_fit():
    # A tokenizer that joins "\n\nQ:" onto the preceding word, so prefix + suffix != sum of the parts.
    def merging(text):
        return text.replace("\n\nQ:", "Q:").split()

    builder = prompts.WordPromptBuilder(merging)
    ps = builder.build("shared", 2, prefix_tokens=50, isl=70)
    assert all(len(merging(p)) == 70 for p in ps.prompts)


def test_unknown_mode(test_tokenizer):
    with pytest.raises(profiles.CliffConfigError, match="prefix_mode"):
        prompts.WordPromptBuilder(test_tokenizer).build("global", 1, 10, 20)


def test_vllm_tokenizer_against_fake_vllm(fake_vllm, test_tokenizer):
    encode = prompts.vllm_tokenizer(fake_vllm.url, "fake-model")
    assert encode("alfa bravo charlie") == test_tokenizer("alfa bravo charlie")
    prefix = prompts.WordPromptBuilder(encode).prefix("per_client", 4, 120)
    assert len(test_tokenizer(prefix)) == 120
