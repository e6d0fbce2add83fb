r"""Chapter 7's question *why do models read tokens rather than characters?*, measured: the chapter's GPT trained
on byte-pair-encoded text (:class:`~attention_course.tokenizer.BPETokenizer`) and on characters, both scored on
the same validation text in bits per character.

A per-token loss cannot compare two tokenizers (a token of three characters is harder to guess than one
character, and there are fewer of them), so every score here is a **code length**: the total number of bits a
model needs to transmit every id of the validation stream, divided by the number of characters the stream spells.
Two models of the same text are then compared on the same quantity, whatever their vocabularies.

* :class:`TokenCorpus`: the training and validation text as ids of one tokenizer, with the validation text's length
  in characters; :func:`char_corpus` (one id per character) and :func:`bpe_corpus` (BPE tokens) build one.
* :func:`ngram_bits`: the code length of a stream under the add-one unigram or bigram model of the training ids.
* :func:`model_bits`: the code length under a trained GPT. The stream is cut into consecutive windows of the
  model's context; within a window each id is predicted from the ids before it, and each window's first id, which
  has no context, is coded with the unigram model — so every id is paid for exactly once.
* :func:`train_tokens`: :func:`~attention_course.experiments.gpt.fit_gpt` on a :class:`TokenCorpus`, scored by
  :func:`model_bits` in bits per character.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from .._checks import check_instance, check_int, check_token_ids
from ..data import Corpus
from ..gpt import GPT
from ..measure import cpu_threads
from ..tokenizer import BPETokenizer
from ..train import History
from .gpt import fit_gpt, ngram_log_probs

__all__ = ["TokenCorpus", "TokenRun", "bpe_corpus", "char_corpus", "model_bits", "ngram_bits", "train_tokens"]

LN2 = math.log(2)


class TokenCorpus(NamedTuple):
    """A text's two splits as ids of one tokenizer.

    Attributes:
        name: what the ids are (``"characters"``, ``"BPE, 512 ids"``).
        train, validation: int64 ids ``(n_train,)``, ``(n_validation,)`` in ``[0, vocab_size)``.
        vocab_size: how many ids the tokenizer has.
        characters: how many characters the validation ids spell (the denominator of bits per character).
    """

    name: str
    train: torch.Tensor
    validation: torch.Tensor
    vocab_size: int
    characters: int


def char_corpus(corpus: Corpus) -> TokenCorpus:
    """``corpus``'s character ids as a :class:`TokenCorpus` (one id per character)."""
    check_instance("corpus", corpus, Corpus)
    return TokenCorpus("characters", corpus.train, corpus.validation, corpus.vocab_size, corpus.validation.numel())


def bpe_corpus(tokenizer: BPETokenizer, train_text: str, validation_text: str) -> TokenCorpus:
    """The two texts encoded by ``tokenizer`` as a :class:`TokenCorpus`.

    Raises:
        TypeError: ``tokenizer`` not a BPETokenizer, a text not a string.
    """
    check_instance("tokenizer", tokenizer, BPETokenizer)
    train, validation = (torch.tensor(tokenizer.encode(t), dtype=torch.long) for t in (train_text, validation_text))
    return TokenCorpus(f"BPE, {tokenizer.vocab_size} ids", train, validation, tokenizer.vocab_size,
                       len(validation_text))


def _check_streams(train: object, ids: object, vocab: object) -> int:
    vocab = check_int("vocab", vocab)
    check_token_ids("train", train, vocab, ndim=1, layout="(n_train,)")
    check_token_ids("ids", ids, vocab, ndim=1, layout="(n,)")
    if train.numel() < 2 or ids.numel() < 1:
        raise ValueError(f"train must hold at least 2 ids and ids at least 1, got {train.numel()} and {ids.numel()}")
    return vocab


def ngram_bits(train: torch.Tensor, ids: torch.Tensor, vocab: int, order: int) -> float:
    r"""The code length in bits of the stream ``ids`` ``(n,)`` under the add-one-smoothed n-gram model of
    ``train`` ``(n_train,)`` (both in ``[0, vocab)``): ``order`` 1, the unigram :math:`p(c) = (N_c + 1)/(N + V)`;
    2, the bigram :math:`p(c \mid b) = (N_{bc} + 1)/(N_b + V)`, its first id coded by the unigram.

    Raises:
        TypeError: ids not integer tensors. ValueError: ids out of range, a ``train`` of fewer than 2 ids or an
            empty ``ids``, ``order`` not 1 or 2.
    """
    vocab = _check_streams(train, ids, vocab)
    log_p = ngram_log_probs(train, vocab, order)
    if order == 1:
        return float(-log_p[ids].sum() / LN2)
    first = -ngram_log_probs(train, vocab, 1)[ids[0]]  # the first id has no id before it
    return float((first - log_p[ids[:-1], ids[1:]].sum()) / LN2)


@torch.no_grad()
def model_bits(model: GPT, train: torch.Tensor, ids: torch.Tensor, *, length: int, batch: int = 64) -> float:
    """The code length in bits of the stream ``ids`` ``(n,)`` under ``model``: consecutive windows of ``length``
    ids (the last one shorter), each id predicted from the ids before it in its window; each window's first id
    coded by the add-one unigram model of ``train`` ``(n_train,)`` (see the module's note). Eval mode; the model's
    mode is restored.

    Raises:
        TypeError: ``model`` not a GPT, ids not integer tensors. ValueError: ids outside the model's vocabulary,
            ``length`` beyond the model's context.
    """
    check_instance("model", model, GPT)
    vocab = _check_streams(train, ids, model.config.vocab_size)
    length = check_int("length", length, high=model.config.max_len)
    batch = check_int("batch", batch)
    first = ngram_log_probs(train, vocab, 1) / LN2  # log2 of the unigram, for each window's first id
    n_full = ids.numel() // length
    windows = [ids[: n_full * length].view(n_full, length)] if n_full else []
    if ids.numel() % length:
        windows.append(ids[n_full * length :].unsqueeze(0))
    device = model.tok_embed.weight.device
    was_training = model.training
    model.eval()
    total = 0.0
    try:
        for rows in windows:
            total -= float(first[rows[:, 0]].sum())
            for i in range(0, rows.shape[0], batch):
                chunk = rows[i : i + batch].to(device)
                if chunk.shape[1] > 1:
                    logits = model(chunk[:, :-1]).flatten(0, 1).float()
                    nats = torch.nn.functional.cross_entropy(logits, chunk[:, 1:].flatten(), reduction="sum")
                    total += float(nats) / LN2
    finally:
        model.train(was_training)
    return total


class TokenRun(NamedTuple):
    """One seed's run of :func:`train_tokens`: the trained model (eval mode), its history (loss in nats per token)
    and its validation score in bits per character (:func:`model_bits` over the corpus's characters)."""

    seed: int
    model: GPT
    history: History
    bits_per_char: float


def train_tokens(corpus: TokenCorpus, seed: int, *, length: int = 64, **settings) -> TokenRun:
    """:func:`~attention_course.experiments.gpt.fit_gpt` on ``corpus.train`` (windows of ``length`` ids; its other
    keyword ``settings``), scored on the whole of ``corpus.validation`` in bits per character.

    Raises:
        TypeError: ``corpus`` not a TokenCorpus. ValueError: its ids outside ``[0, vocab_size)``; what
            :func:`fit_gpt` refuses.
    """
    check_instance("corpus", corpus, TokenCorpus)
    vocab = check_int("corpus.vocab_size", corpus.vocab_size)
    for split in ("train", "validation"):
        check_token_ids(f"corpus.{split}", getattr(corpus, split), vocab, ndim=1, layout="(n,)")
    model, history = fit_gpt(corpus.train, corpus.vocab_size, seed, length=length, **settings)
    with cpu_threads(settings.get("threads", 1)):
        bits = model_bits(model, corpus.train, corpus.validation, length=length)
    return TokenRun(seed, model, history, bits / corpus.characters)
