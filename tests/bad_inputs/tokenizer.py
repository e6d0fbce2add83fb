"""Bad inputs for tokenizer.py: text that is not a string, a vocabulary below the 256 bytes, ids out of range,
merge lists that name ids not yet made."""

from __future__ import annotations

from attention_course.tokenizer import BPETokenizer
from bad_inputs import case

TOK = BPETokenizer([(97, 98)])

CASES = [
    case(BPETokenizer, lambda: BPETokenizer.train(b"abc", 300), TypeError, arg="text", id="tokenizer.train-bytes"),
    case(BPETokenizer, lambda: BPETokenizer.train("abc", 100), ValueError, arg="vocab_size",
         id="tokenizer.train-vocab"),
    case(BPETokenizer, lambda: BPETokenizer.train("abc", 300.0), TypeError, arg="vocab_size",
         id="tokenizer.train-vocab-float"),
    case(BPETokenizer, lambda: BPETokenizer([(97, 300)]), ValueError, arg="merges[0]", id="tokenizer.merges-future"),
    case(BPETokenizer, lambda: BPETokenizer([(97,)]), TypeError, arg="merges[0]", says="pair",
         id="tokenizer.merges-not-pair"),
    case(BPETokenizer, lambda: BPETokenizer("ab"), TypeError, arg="merges", id="tokenizer.merges-str"),
    case(BPETokenizer, lambda: TOK.encode(["ab"]), TypeError, arg="text", id="tokenizer.encode-list"),
    case(BPETokenizer, lambda: TOK.decode([97, 257]), ValueError, arg="ids[1]", says="257",
         id="tokenizer.decode-range"),
    case(BPETokenizer, lambda: TOK.decode("ab"), TypeError, arg="ids", id="tokenizer.decode-str"),
    case(BPETokenizer, lambda: TOK.token_bytes(-1), ValueError, arg="token", id="tokenizer.token_bytes-negative"),
]
