#!/usr/bin/env python3
"""Generate a tiny random-weight Llama model and a byte-level BPE tokenizer, fully offline.

Deterministic (fixed seed, fixed corpus) so the same inputs give the same files. Used by the cpu image flavour:
vLLM on CPU serves it with real prefix caching and LMCache KV offload; quality is irrelevant.
"""

import argparse
import os

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>{{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "The capital of France is Paris. The capital of Italy is Rome.",
    "KV cache blocks are stored by LMCache and loaded back by vLLM as external prefix cache hits.",
    "0123456789 !?.,;:()[]{}<>+-*/=_'\"",
] * 50


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("output")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--max-positions", type=int, default=2048)
    args = parser.parse_args()
    os.makedirs(args.output, exist_ok=True)

    tokenizer = Tokenizer(models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=["<s>", "</s>", "<|user|>", "<|assistant|>", "<|system|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(CORPUS, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(args.output)

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(fast),
        hidden_size=args.hidden,
        intermediate_size=args.hidden * 2,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        max_position_embeddings=args.max_positions,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(config)
    model.save_pretrained(args.output, safe_serialization=True)
    print(f"tiny model written to {args.output}: vocab={len(fast)} layers={args.layers} hidden={args.hidden}")


if __name__ == "__main__":
    main()
