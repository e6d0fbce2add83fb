r"""A decoder-only language model (GPT) built from the course's own blocks (chapter 7).

``logits = LN(Layers(Emb(tokens) [+ P]))·Embᵀ``: token embeddings, a stack of
:class:`~attention_course.layers.DecoderOnlyLayer` (causal self-attention and a feed-forward network, pre-LN by
default, as GPT-2; the paper's post-LN with ``norm_first=False``), a final LayerNorm, and an output projection *tied*
to the token embedding (one ``(vocab, d_model)`` matrix reads tokens in and scores them out).

Positions come in one of two ways:

* ``"learned"``: a table ``P`` of ``max_len`` position vectors added to the embeddings (GPT-2; needed to load its
  weights, :func:`attention_course.interop.from_gpt2_state_dict`);
* ``"rotary"``: nothing is added; every attention layer rotates its queries and keys by their positions
  (:func:`~attention_course.positional.apply_rope` through the rotary hook of
  :class:`~attention_course.multihead.MultiHeadAttention`), so scores depend on positions only through offsets.

Generation keeps each layer's keys and values in a :class:`GPTCache` (rotated keys are cached with their
positions): the prompt goes through once (the *prefill*, causal mask aligned upper-left — with an empty cache the
two alignments coincide) and then each new token attends to every cached position (*decoding*, lower-right: see
:mod:`attention_course.masks`). :func:`generate` draws the tokens with :mod:`attention_course.sampling`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from ._checks import (
    as_index,
    check_choice,
    check_flag,
    check_generator,
    check_instance,
    check_int,
    check_real,
    check_tensor,
    check_token_ids,
    describe,
)
from .layers import DecoderOnlyLayer
from .multihead import KVCache
from .positional import apply_rope
from .sampling import sample_next

__all__ = ["GPT", "GPTCache", "GPTConfig", "generate", "gelu_tanh"]

POSITIONS = ("learned", "rotary")
ACTIVATIONS = ("gelu", "gelu_tanh", "relu")


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """GELU with the tanh approximation (GPT-2's ``gelu_new``): ``F.gelu(x, approximate="tanh")``."""
    check_tensor("x", x)
    return F.gelu(x, approximate="tanh")


@dataclass(frozen=True)
class GPTConfig:
    """The sizes and options of a :class:`GPT` (chapter 7). Checked when made.

    Attributes:
        vocab_size: tokens in the vocabulary.
        d_model, n_layers, n_heads: width, depth and attention heads (``n_heads`` divides ``d_model``).
        num_kv_heads: key/value heads (divides ``n_heads``; None = ``n_heads``; fewer is grouped-query attention).
        max_len: the longest sequence: the size of the learned position table, and the default cache capacity.
        positions: ``"learned"`` (added to the embeddings, GPT-2) or ``"rotary"`` (inside attention).
        dim_feedforward: the feed-forward width (None: ``4·d_model``).
        dropout: on embeddings, attention weights and sublayer outputs (training mode only).
        activation: ``"gelu"``, ``"gelu_tanh"`` (GPT-2) or ``"relu"``.
        norm_first: pre-LN (True, GPT-2) or the paper's post-LN (False).
        layer_norm_eps, bias: as :class:`torch.nn.LayerNorm` and the linear layers.
        rope_base: the rotary frequencies' base.
    """

    vocab_size: int
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    num_kv_heads: int | None = None
    max_len: int = 256
    positions: str = "rotary"
    dim_feedforward: int | None = None
    dropout: float = 0.0
    activation: str = "gelu"
    norm_first: bool = True
    layer_norm_eps: float = 1e-5
    bias: bool = True
    rope_base: float = 10000.0

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "max_len"):
            check_int(name, getattr(self, name))
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model must be divisible by n_heads, got d_model={self.d_model} and "
                             f"n_heads={self.n_heads}")
        if self.num_kv_heads is not None:
            check_int("num_kv_heads", self.num_kv_heads)
            if self.n_heads % self.num_kv_heads:
                raise ValueError(f"num_kv_heads must divide n_heads={self.n_heads}, got {self.num_kv_heads}")
        check_choice("positions", self.positions, POSITIONS)
        if self.positions == "rotary" and (self.d_model // self.n_heads) % 2:
            raise ValueError(f"d_model / n_heads must be even for rotary positions (pairs of coordinates rotate), got "
                             f"d_model={self.d_model} and n_heads={self.n_heads}")
        if self.dim_feedforward is not None:
            check_int("dim_feedforward", self.dim_feedforward)
        check_real("dropout", self.dropout, low=0.0, high=1.0)
        check_choice("activation", self.activation, ACTIVATIONS)
        check_flag("norm_first", self.norm_first)
        check_real("layer_norm_eps", self.layer_norm_eps, low=0.0, open_low=True)
        check_flag("bias", self.bias)
        check_real("rope_base", self.rope_base, low=0.0, open_low=True)


@dataclass
class GPTCache:
    """Every layer's :class:`~attention_course.multihead.KVCache` during generation (chapter 7), made by
    :meth:`GPT.new_cache`. ``owner`` identifies that model, so a cache from another model is refused."""

    layers: list[KVCache] = field(default_factory=list)
    owner: int | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_instance("layers", self.layers, list)
        for i, c in enumerate(self.layers):
            check_instance(f"layers[{i}]", c, KVCache)

    @property
    def length(self) -> int:
        """Positions cached (the prompt and the tokens generated so far)."""
        return self.layers[0].length if self.layers else 0

    @property
    def capacity(self) -> int:
        return self.layers[0].capacity if self.layers else 0

    @property
    def nbytes(self) -> int:
        """Bytes of cached keys and values in use, over all layers: ``2·n_layers·num_kv_heads·d_k·length·batch``
        elements (grouped-query attention divides it by ``n_heads / num_kv_heads``)."""
        return sum(c.nbytes for c in self.layers)


class GPT(nn.Module):
    """A decoder-only Transformer language model (chapter 7): ``forward(tokens) → next-token logits``.

    Args:
        config: a :class:`GPTConfig`.
        device, dtype: where and in which dtype to create the parameters.

    Parameters: ``tok_embed`` ``(vocab, d_model)`` (tied to ``head``), ``pos_embed`` ``(max_len, d_model)`` with
    learned positions, ``layers`` (:class:`~attention_course.layers.DecoderOnlyLayer`), ``norm``. Initialised as
    GPT-2: normal with standard deviation 0.02, the projections into the residual stream (``out_proj``,
    ``linear2``) scaled by ``1/√(2·n_layers)``, zero biases, LayerNorms at (1, 0).
    """

    def __init__(self, config: GPTConfig, *, device: torch.device | str | None = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.config = check_instance("config", config, GPTConfig)
        c, factory = config, {"device": device, "dtype": dtype}
        self.tok_embed = nn.Embedding(c.vocab_size, c.d_model, **factory)
        self.pos_embed = nn.Embedding(c.max_len, c.d_model, **factory) if c.positions == "learned" else None
        self.drop = nn.Dropout(c.dropout)
        rotary = functools.partial(apply_rope, base=c.rope_base) if c.positions == "rotary" else None
        act = gelu_tanh if c.activation == "gelu_tanh" else c.activation
        self.layers = nn.ModuleList(
            DecoderOnlyLayer(c.d_model, c.n_heads, c.dim_feedforward, c.dropout, activation=act,
                             norm_first=c.norm_first, layer_norm_eps=c.layer_norm_eps, bias=c.bias,
                             num_kv_heads=c.num_kv_heads, rotary=rotary, **factory)
            for _ in range(c.n_layers))
        self.norm = nn.LayerNorm(c.d_model, eps=c.layer_norm_eps, bias=c.bias, **factory)
        self.head = nn.Linear(c.d_model, c.vocab_size, bias=False, **factory)
        self.head.weight = self.tok_embed.weight  # weight tying: one matrix in and out
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """GPT-2's initialisation (see the class)."""
        residual_std = 0.02 / (2 * self.config.n_layers) ** 0.5
        for name, p in self.named_parameters():
            if p.ndim == 1:
                nn.init.ones_(p) if "norm" in name and name.endswith("weight") else nn.init.zeros_(p)
            else:
                std = residual_std if name.endswith(("out_proj.weight", "linear2.weight")) else 0.02
                nn.init.normal_(p, std=std)

    @property
    def d_model(self) -> int:
        return self.config.d_model

    def extra_repr(self) -> str:
        c = self.config
        kv = "" if c.num_kv_heads in (None, c.n_heads) else f", num_kv_heads={c.num_kv_heads}"
        return f"vocab={c.vocab_size}, positions={c.positions!r}{kv}"

    # ------------------------------------------------------------------------------------------ checks
    def _check_tokens(self, tokens: object, start: int) -> torch.Tensor:
        """Token ids ``(batch, n)`` on the model's device, in ``[0, vocab)``, at positions below ``max_len``
        (learned positions only: rotary positions have no table)."""
        check_tensor("tokens", tokens, kind="integer", ndim=2, layout="of token ids (batch, n)")
        device = self.tok_embed.weight.device
        if tokens.device != device:
            raise ValueError(f"tokens must be on the model's device {device}, got {describe(tokens)}")
        if self.pos_embed is not None and start + tokens.shape[1] > self.config.max_len:
            raise ValueError(f"tokens must fit the learned positions: at most {self.config.max_len - start} from "
                             f"position {start} (max_len={self.config.max_len}), got shape {tuple(tokens.shape)}")
        if device.type != "meta":
            check_token_ids("tokens", tokens, self.config.vocab_size)
        return tokens

    def _check_cache(self, cache: object, tokens: torch.Tensor) -> GPTCache:
        check_instance("cache", cache, GPTCache)
        if cache.owner is not None and cache.owner != id(self):
            raise ValueError("cache must come from this model's new_cache, got a GPTCache made by another model")
        if len(cache.layers) != len(self.layers):
            raise ValueError(f"cache must hold one KVCache per layer ({len(self.layers)}), got {len(cache.layers)}")
        if cache.layers and cache.layers[0].keys.shape[0] != tokens.shape[0]:
            raise ValueError(f"tokens must have the cache's batch size {cache.layers[0].keys.shape[0]}, got shape "
                             f"{tuple(tokens.shape)}")
        if cache.length + tokens.shape[1] > cache.capacity:
            raise ValueError(f"tokens must fit the cache: it holds {cache.capacity} positions and {cache.length} are "
                             f"used, so at most {cache.capacity - cache.length} more; got {tokens.shape[1]}")
        return cache

    # ------------------------------------------------------------------------------------------ the model
    def embed(self, tokens: torch.Tensor, start: int = 0) -> torch.Tensor:
        """``(batch, n)`` ids at positions ``start, …`` → ``(batch, n, d_model)``: ``Emb(tokens) [+ P]``, dropout."""
        start = check_int("start", start, low=0)
        self._check_tokens(tokens, start)
        x = self.tok_embed(as_index(tokens))
        if self.pos_embed is not None:
            x = x + self.pos_embed(torch.arange(start, start + tokens.shape[1], device=tokens.device))
        return self.drop(x)

    def forward(
        self,
        tokens: torch.Tensor,
        cache: GPTCache | None = None,
        *,
        attn_weights: list[torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """Next-token logits ``(batch, n, vocab)`` for ids ``tokens`` ``(batch, n)``: position ``t`` predicts token
        ``t + 1`` from tokens ``0..t`` (the causal mask gives every position its prediction in one pass).

        Args:
            cache: a :class:`GPTCache` from :meth:`new_cache` (eval mode): ``tokens`` sit at positions
                ``cache.length, …``, attend to every cached position too, and their keys and values are appended.
            attn_weights: if a list, each layer's per-head weights ``(batch, n_heads, n, n_k)`` are appended to it.

        Returns:
            ``(batch, n, vocab)``. With a cache, equal (to rounding) to the last ``n`` positions of the uncached
            pass over the whole sequence. At the edges: ``n = 0`` gives ``(batch, 0, vocab)`` and leaves the cache
            as it was.

        Raises:
            TypeError: ``tokens`` not an integer tensor, ``cache`` not a :class:`GPTCache`.
            ValueError: ``tokens`` not 2-D, ids outside ``[0, vocab)``, past ``max_len`` (learned positions), on
                another device; a cache of another model or batch, or without room.
        """
        check_tensor("tokens", tokens, kind="integer", ndim=2, layout="of token ids (batch, n)")
        if cache is not None:
            self._check_cache(cache, tokens)
        if attn_weights is not None:
            check_instance("attn_weights", attn_weights, list)
        start = 0 if cache is None else cache.length
        x = self.embed(tokens, start)
        for i, layer in enumerate(self.layers):
            x = layer(x, cache=None if cache is None else cache.layers[i], attn_weights=attn_weights)
        return self.head(self.norm(x))

    def new_cache(self, batch: int, capacity: int | None = None) -> GPTCache:
        """An empty :class:`GPTCache` for ``batch`` sequences of up to ``capacity`` positions (default ``max_len``;
        at most ``max_len`` with learned positions)."""
        batch = check_int("batch", batch, low=0)
        high = self.config.max_len if self.pos_embed is not None else None
        capacity = check_int("capacity", self.config.max_len if capacity is None else capacity, high=high)
        return GPTCache([layer.self_attn.new_cache(batch, capacity) for layer in self.layers], owner=id(self))

    @torch.no_grad()
    def attention_maps(self, tokens: torch.Tensor) -> list[torch.Tensor]:
        """Per layer, the per-head attention weights ``(batch, n_heads, n, n)`` of ``tokens`` (eval mode)."""
        was_training = self.training
        self.eval()
        maps: list[torch.Tensor] = []
        try:
            self(tokens, attn_weights=maps)
        finally:
            self.train(was_training)
        return maps


@torch.no_grad()
def generate(
    model: GPT,
    prompt: torch.Tensor,
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
    return_logits: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Continue ``prompt`` ``(batch, n)`` by ``max_new_tokens`` tokens drawn one at a time (chapter 7).

    Each step's logits at the last position go through :func:`attention_course.sampling.sample_next`
    (``temperature = 0``: greedy; ``top_k``, ``top_p``: the filters; ``generator``: a seeded CPU generator).
    With ``use_cache`` the prompt is run once (prefill) and then only the newest token (decoding), reading the
    others' keys and values from a :class:`GPTCache`; without it every step re-runs the whole sequence. Both give
    the same tokens (tested). The model is put in eval mode for the call.

    Returns:
        ``tokens`` ``(batch, n + max_new_tokens)``, the prompt first; with ``return_logits`` also the logits each
        new token was drawn from, ``(batch, max_new_tokens, vocab)``.

    Raises:
        TypeError: ``model`` not a :class:`GPT`; bad kinds as :meth:`GPT.forward` and ``sample_next``.
        ValueError: an empty prompt (``n = 0``: nothing to predict from), a sequence longer than the learned
            positions, or the sampling settings ``sample_next`` refuses.
    """
    check_instance("model", model, GPT)
    check_tensor("prompt", prompt, kind="integer", ndim=2, layout="of token ids (batch, n)")
    if prompt.shape[1] == 0:
        raise ValueError(f"prompt must hold at least one token per row to predict from, got shape "
                         f"{tuple(prompt.shape)}")
    max_new_tokens = check_int("max_new_tokens", max_new_tokens, low=0)
    use_cache, return_logits = check_flag("use_cache", use_cache), check_flag("return_logits", return_logits)
    check_real("temperature", temperature, low=0.0)  # checked here too: with max_new_tokens = 0 nothing is drawn
    if top_k is not None:
        check_int("top_k", top_k)
    if top_p is not None:
        check_real("top_p", top_p, low=0.0, high=1.0, open_low=True)
    check_generator("generator", generator)
    total = prompt.shape[1] + max_new_tokens
    if model.pos_embed is not None and total > model.config.max_len:
        raise ValueError(f"max_new_tokens must keep the sequence within max_len={model.config.max_len} (learned "
                         f"positions): the prompt has {prompt.shape[1]}, so at most "
                         f"{model.config.max_len - prompt.shape[1]}; got {max_new_tokens}")
    was_training = model.training
    model.eval()
    tokens, steps = prompt, []
    try:
        cache = model.new_cache(prompt.shape[0], total) if use_cache else None
        logits = model(prompt, cache)[:, -1]
        for i in range(max_new_tokens):
            nxt = sample_next(logits, temperature=temperature, top_k=top_k, top_p=top_p, generator=generator)
            tokens = torch.cat([tokens, nxt[:, None].to(tokens.dtype)], dim=1)
            steps.append(logits)
            if i + 1 < max_new_tokens:
                logits = (model(nxt[:, None], cache) if use_cache else model(tokens))[:, -1]
    finally:
        model.train(was_training)
    if return_logits:
        vocab = model.config.vocab_size
        empty = model.tok_embed.weight.new_zeros((prompt.shape[0], 0, vocab))
        stacked = torch.stack(steps, dim=1) if steps else empty
        return tokens, stacked
    return tokens
