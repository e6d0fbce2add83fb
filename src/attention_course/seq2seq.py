r"""The encoder–decoder Transformer of Vaswani et al. (2017) and its greedy decoder (chapter 5).

:class:`Transformer` is the core (two stacks of :mod:`attention_course.layers`), structured and named exactly as
:class:`torch.nn.Transformer`, so :mod:`attention_course.interop` copies a PyTorch model's weights and the tests
compare the two numerically. Deliberate differences: masks follow the package convention (boolean, True = may
attend; padding as key masks ``(batch, n)``, True = a real token), ``tgt_is_causal=True`` *applies* the causal mask
(in PyTorch it is only a hint), every layer can return its per-head attention weights, and a query with no
allowed key gives zeros, never NaN.

:class:`Seq2SeqTransformer` adds what the paper adds around the core: token embeddings multiplied by
:math:`\sqrt{d_\text{model}}`, sinusoidal positions, an output projection tied to the embeddings, and
incremental decoding with the attention layers' key/value caches (:class:`DecoderCache`, :func:`greedy_decode`).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

import torch
from torch import nn

from .layers import Activation, TransformerDecoderLayer, TransformerEncoderLayer, check_sequence
from .multihead import KVCache
from .positional import SinusoidalPositionalEncoding

__all__ = [
    "AttentionMaps",
    "DecoderCache",
    "Seq2SeqTransformer",
    "Transformer",
    "TransformerDecoder",
    "TransformerEncoder",
    "greedy_decode",
    "param_count",
]


class _Stack(nn.Module):
    """``num_layers`` deep copies of one layer (identical until re-initialised) in ``self.layers``, and an optional
    final ``norm``, as PyTorch's stacks."""

    _layer_type: type = nn.Module

    def __init__(self, layer: nn.Module, num_layers: int, norm: nn.Module | None = None) -> None:
        super().__init__()
        if not isinstance(layer, self._layer_type):
            raise TypeError(f"the layer must be a {self._layer_type.__name__}, got {type(layer).__name__}")
        if not isinstance(num_layers, int) or isinstance(num_layers, bool) or num_layers < 1:
            raise ValueError(f"num_layers must be a positive integer, got {num_layers!r}")
        self.layers = nn.ModuleList([copy.deepcopy(layer) for _ in range(num_layers)])
        self.num_layers, self.norm = num_layers, norm


@dataclass
class DecoderCache:
    """The state of incremental decoding (chapter 5; timed in chapter 6): each decoder layer's
    ``(self-attention cache, cross-attention cache)`` — the keys and values of every target position decoded so
    far, and the encoder memory's keys and values, projected once — and the memory's key mask."""

    layers: list[tuple[KVCache, KVCache]] = field(default_factory=list)
    memory_key_mask: torch.Tensor | None = None

    @property
    def length(self) -> int:
        """How many target positions are cached."""
        return self.layers[0][0].length if self.layers else 0

    @property
    def capacity(self) -> int:
        """The most target positions the cache can hold."""
        return self.layers[0][0].capacity if self.layers else 0

    @property
    def nbytes(self) -> int:
        """Bytes of keys and values in use: the cached target positions and the projected memory of every layer."""
        return sum(self_cache.nbytes + cross.nbytes for self_cache, cross in self.layers)


class TransformerEncoder(_Stack):
    """A stack of ``num_layers`` copies of ``encoder_layer`` and an optional final ``norm`` (chapter 5).

    As :class:`torch.nn.TransformerEncoder`: the layers are deep copies of the one given (identical until
    re-initialised), in ``self.layers``.
    """

    _layer_type = TransformerEncoderLayer

    def forward(self, src: torch.Tensor, *, mask: torch.Tensor | None = None, **options) -> torch.Tensor:
        """Run every layer, then ``norm``. ``mask`` is each layer's ``src_mask``; ``options`` (``src_key_mask``,
        ``is_causal``, ``attn_weights``) go to every layer as in :meth:`TransformerEncoderLayer.forward`."""
        x = src
        for layer in self.layers:
            x = layer(x, src_mask=mask, **options)
        return x if self.norm is None else self.norm(x)


class TransformerDecoder(_Stack):
    """A stack of ``num_layers`` copies of ``decoder_layer`` and an optional final ``norm`` (chapter 5)."""

    _layer_type = TransformerDecoderLayer

    def forward(
        self, tgt: torch.Tensor, memory: torch.Tensor | None, *, cache: DecoderCache | None = None, **options
    ) -> torch.Tensor:
        """Run every layer, then ``norm``. ``options`` (masks, ``tgt_is_causal``, weight lists) go to every layer as
        in :meth:`TransformerDecoderLayer.forward`; ``cache`` holds every layer's caches (decoding)."""
        x = tgt
        for i, layer in enumerate(self.layers):
            x = layer(x, memory, cache=None if cache is None else cache.layers[i], **options)
        return x if self.norm is None else self.norm(x)


@dataclass
class AttentionMaps:
    """Per-head attention weights of every layer, from :meth:`Seq2SeqTransformer.attention_maps`.

    Attributes:
        encoder: per encoder layer, ``(batch, nhead, n_src, n_src)``.
        decoder_self: per decoder layer, ``(batch, nhead, n_tgt, n_tgt)`` (causal: zero above the diagonal).
        cross: per decoder layer, ``(batch, nhead, n_tgt, n_src)``: decoder queries, encoder keys.
    """

    encoder: list[torch.Tensor] = field(default_factory=list)
    decoder_self: list[torch.Tensor] = field(default_factory=list)
    cross: list[torch.Tensor] = field(default_factory=list)


class Transformer(nn.Module):
    """The encoder–decoder core of Vaswani et al. (2017), as :class:`torch.nn.Transformer` (chapter 5).

    Same constructor (without ``custom_encoder``/``custom_decoder``), submodules and parameter names as
    PyTorch's: ``encoder`` (``num_encoder_layers`` layers and a final LayerNorm), ``decoder`` (likewise), so
    :func:`attention_course.interop.from_torch` copies a PyTorch model; parameters with more than one dimension
    are Xavier-uniform initialised, as PyTorch does. No embeddings and no output projection (see
    :class:`Seq2SeqTransformer`).
    """

    def __init__(
        self,
        d_model: int = 512,
        nhead: int = 8,
        num_encoder_layers: int = 6,
        num_decoder_layers: int = 6,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: Activation = "relu",
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        common = (d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps, batch_first, norm_first,
                  bias)
        self.encoder = TransformerEncoder(TransformerEncoderLayer(*common, **factory), num_encoder_layers,
                                          nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory))
        self.decoder = TransformerDecoder(TransformerDecoderLayer(*common, **factory), num_decoder_layers,
                                          nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory))
        self.d_model, self.nhead, self.batch_first = d_model, nhead, bool(batch_first)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    def forward(
        self,
        src: torch.Tensor,
        tgt: torch.Tensor,
        *,
        src_mask: torch.Tensor | None = None,
        tgt_mask: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
        src_key_mask: torch.Tensor | None = None,
        tgt_key_mask: torch.Tensor | None = None,
        memory_key_mask: torch.Tensor | None = None,
        src_is_causal: bool = False,
        tgt_is_causal: bool = False,
        attn_maps: AttentionMaps | None = None,
    ) -> torch.Tensor:
        """Encode ``src``, decode ``tgt`` attending to the encoding.

        Args:
            src: ``(batch, n_src, d_model)`` if ``batch_first`` else ``(n_src, batch, d_model)``.
            tgt: ``(batch, n_tgt, d_model)`` / ``(n_tgt, batch, d_model)``.
            src_mask, tgt_mask, memory_mask: boolean, True = may attend; ``(n_src, n_src)``, ``(n_tgt, n_tgt)``,
                ``(n_tgt, n_src)`` (or 4-D ``(batch|1, nhead|1, n_q, n_k)``).
            src_key_mask, tgt_key_mask, memory_key_mask: boolean ``(batch, n)``, True = real token
                (``memory_key_mask`` is usually ``src_key_mask``).
            src_is_causal, tgt_is_causal: apply the causal mask in the encoder / decoder self-attention.
            attn_maps: an :class:`AttentionMaps` to fill with every layer's per-head weights (explicit path).

        Returns:
            ``(batch, n_tgt, d_model)`` / ``(n_tgt, batch, d_model)``: the decoder's output.

        Raises:
            TypeError, ValueError: inputs or masks of the wrong kind or shape (the messages name both).
        """
        check_sequence("src", src, self.d_model, self.batch_first)
        check_sequence("tgt", tgt, self.d_model, self.batch_first)
        b_dim = 0 if self.batch_first else 1
        if src.ndim != tgt.ndim or (src.ndim == 3 and src.shape[b_dim] != tgt.shape[b_dim]):
            raise ValueError(f"src and tgt must have the same batch size, got src {tuple(src.shape)} and tgt "
                             f"{tuple(tgt.shape)} ({'batch_first' if self.batch_first else 'sequence-first'})")
        memory = self.encoder(src, mask=src_mask, src_key_mask=src_key_mask, is_causal=src_is_causal,
                              attn_weights=None if attn_maps is None else attn_maps.encoder)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask, tgt_key_mask=tgt_key_mask,
                            memory_key_mask=memory_key_mask, tgt_is_causal=tgt_is_causal,
                            self_weights=None if attn_maps is None else attn_maps.decoder_self,
                            cross_weights=None if attn_maps is None else attn_maps.cross)



# ------------------------------------------------------------------------------------------ the whole model
def param_count(model: nn.Module) -> int:
    """Number of distinct parameters (a tied matrix counts once)."""
    return sum(p.numel() for p in model.parameters())


class Seq2SeqTransformer(nn.Module):
    r"""A complete sequence-to-sequence Transformer: tokens in, next-token logits out (chapter 5).

    ``logits = Generator(Decoder(Emb(tgt)·√d_model + PE, Encoder(Emb(src)·√d_model + PE)))``, with the core
    :class:`Transformer` (``batch_first=True``), sinusoidal positions (dropout applied to their sum, as the
    paper), and the output projection ``generator``.

    Args:
        src_vocab, tgt_vocab: vocabulary sizes (``tgt_vocab`` defaults to ``src_vocab``).
        d_model, nhead, num_encoder_layers, num_decoder_layers, dim_feedforward, dropout, norm_first,
            activation: as :class:`Transformer`.
        max_len: the longest sequence the positional table covers.
        pad_id: the padding token; when not None, ``forward`` derives the source key mask from it.
        share_embeddings: one embedding matrix for source and target (needs equal vocabularies).
        tie_output: the output projection reuses the target embedding matrix (the paper shares all three).

    The embeddings are initialised with standard deviation :math:`d_\text{model}^{-1/2}`, so that the scaled
    embedding has entries of size about 1, like the positional encoding, and tied output logits start small.
    """

    def __init__(
        self,
        src_vocab: int,
        tgt_vocab: int | None = None,
        d_model: int = 512,
        nhead: int = 8,
        num_encoder_layers: int = 6,
        num_decoder_layers: int = 6,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        *,
        max_len: int = 512,
        pad_id: int | None = 0,
        share_embeddings: bool = True,
        tie_output: bool = True,
        norm_first: bool = False,
        activation: Activation = "relu",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        tgt_vocab = src_vocab if tgt_vocab is None else tgt_vocab
        if share_embeddings and tgt_vocab != src_vocab:
            raise ValueError(f"share_embeddings needs src_vocab == tgt_vocab, got {src_vocab} and {tgt_vocab}")
        factory = {"device": device, "dtype": dtype}
        self.d_model, self.pad_id, self.src_vocab, self.tgt_vocab = d_model, pad_id, src_vocab, tgt_vocab
        self.scale = math.sqrt(d_model)
        self.src_embed = nn.Embedding(src_vocab, d_model, **factory)
        self.tgt_embed = self.src_embed if share_embeddings else nn.Embedding(tgt_vocab, d_model, **factory)
        self.positions = SinusoidalPositionalEncoding(d_model, max_len, dropout, **factory)
        self.transformer = Transformer(d_model, nhead, num_encoder_layers, num_decoder_layers, dim_feedforward,
                                       dropout, activation, batch_first=True, norm_first=norm_first, **factory)
        self.generator = nn.Linear(d_model, tgt_vocab, bias=False, **factory)
        for emb in {id(self.src_embed): self.src_embed, id(self.tgt_embed): self.tgt_embed}.values():
            nn.init.normal_(emb.weight, std=d_model**-0.5)
        if tie_output:
            self.generator.weight = self.tgt_embed.weight

    # ------------------------------------------------------------------------------------------- pieces
    def _check_tokens(self, name: str, ids: torch.Tensor, vocab: int) -> None:
        if not isinstance(ids, torch.Tensor) or ids.is_floating_point() or ids.dtype == torch.bool:
            got = ids.dtype if isinstance(ids, torch.Tensor) else type(ids).__name__
            raise TypeError(f"{name} must be an integer tensor of token ids (batch, n), got {got}")
        if ids.ndim != 2:
            raise ValueError(f"{name} must have shape (batch, n), got {tuple(ids.shape)}")
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab):
            raise ValueError(f"{name} ids must lie in [0, {vocab}), got range [{int(ids.min())}, {int(ids.max())}]")

    def src_key_mask_for(self, src: torch.Tensor) -> torch.Tensor | None:
        """``src != pad_id`` (True = real token), or None when the model has no ``pad_id``."""
        return None if self.pad_id is None else src != self.pad_id

    def embed_src(self, src: torch.Tensor) -> torch.Tensor:
        """``(batch, n) ids -> (batch, n, d_model)``: ``Emb(src)·√d_model + PE`` (then dropout)."""
        return self.positions(self.src_embed(src) * self.scale)

    def embed_tgt(self, tgt: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """As :meth:`embed_src` for target ids at positions ``offset, offset + 1, …``."""
        return self.positions(self.tgt_embed(tgt) * self.scale, offset)

    def encode(self, src: torch.Tensor, src_key_mask: torch.Tensor | None = None) -> torch.Tensor:
        """The encoder's output (the *memory*) ``(batch, n_src, d_model)`` for source ids ``(batch, n_src)``.
        ``src_key_mask`` (True = real token) defaults to ``src != pad_id``."""
        self._check_tokens("src", src, self.src_vocab)
        mask = self.src_key_mask_for(src) if src_key_mask is None else src_key_mask
        return self.transformer.encoder(self.embed_src(src), src_key_mask=mask)

    def decode(
        self,
        tgt: torch.Tensor,
        memory: torch.Tensor,
        memory_key_mask: torch.Tensor | None = None,
        tgt_key_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits ``(batch, n_tgt, tgt_vocab)`` for every target prefix, recomputed in full (causal mask).

        Position ``t`` of the output predicts token ``t + 1`` from tokens ``0..t`` of ``tgt`` (ids,
        ``(batch, n_tgt)``) and from ``memory`` (from :meth:`encode`)."""
        self._check_tokens("tgt", tgt, self.tgt_vocab)
        out = self.transformer.decoder(self.embed_tgt(tgt), memory, tgt_key_mask=tgt_key_mask,
                                       memory_key_mask=memory_key_mask, tgt_is_causal=True)
        return self.generator(out)

    def forward(
        self,
        src: torch.Tensor,
        tgt: torch.Tensor,
        src_key_mask: torch.Tensor | None = None,
        tgt_key_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Teacher-forced logits ``(batch, n_tgt, tgt_vocab)`` for source ids ``(batch, n_src)`` and target ids
        ``(batch, n_tgt)`` (usually ``BOS y_1 … y_{m}``; position ``t`` predicts ``y_{t+1}``).
        ``src_key_mask`` defaults to ``src != pad_id`` and also masks the cross-attention."""
        self._check_tokens("src", src, self.src_vocab)
        self._check_tokens("tgt", tgt, self.tgt_vocab)
        if src.shape[0] != tgt.shape[0]:
            raise ValueError(f"src and tgt must have the same batch size, got src {tuple(src.shape)} and tgt "
                             f"{tuple(tgt.shape)}")
        mask = self.src_key_mask_for(src) if src_key_mask is None else src_key_mask
        memory = self.transformer.encoder(self.embed_src(src), src_key_mask=mask)
        out = self.transformer.decoder(self.embed_tgt(tgt), memory, tgt_key_mask=tgt_key_mask,
                                       memory_key_mask=mask, tgt_is_causal=True)
        return self.generator(out)

    @torch.no_grad()
    def attention_maps(
        self, src: torch.Tensor, tgt: torch.Tensor, src_key_mask: torch.Tensor | None = None
    ) -> AttentionMaps:
        """Every layer's per-head attention weights for a teacher-forced pass (eval mode; see
        :class:`AttentionMaps`). Encoder self-attention, decoder causal self-attention and cross-attention,
        where the queries come from the decoder and the keys and values from the encoder."""
        self._check_tokens("src", src, self.src_vocab)
        self._check_tokens("tgt", tgt, self.tgt_vocab)
        was_training = self.training
        self.eval()
        mask = self.src_key_mask_for(src) if src_key_mask is None else src_key_mask
        maps = AttentionMaps()
        self.transformer(self.embed_src(src), self.embed_tgt(tgt), src_key_mask=mask, memory_key_mask=mask,
                         tgt_is_causal=True, attn_maps=maps)
        self.train(was_training)
        return maps

    # ----------------------------------------------------------------------------- incremental decoding
    def new_cache(
        self, memory: torch.Tensor, memory_key_mask: torch.Tensor | None = None, capacity: int | None = None
    ) -> DecoderCache:
        """An empty :class:`DecoderCache` for decoding against ``memory`` ``(batch, n_src, d_model)``: every decoder
        layer's cross-attention keys and values are projected here, once (chapter 6 counts the saving).
        ``capacity`` (default ``max_len``) is the most target positions it will hold."""
        if not isinstance(memory, torch.Tensor) or memory.ndim != 3 or memory.shape[-1] != self.d_model:
            got = tuple(memory.shape) if isinstance(memory, torch.Tensor) else type(memory).__name__
            raise ValueError(f"memory must have shape (batch, n_src, d_model={self.d_model}), got {got}")
        capacity = self.positions.max_len if capacity is None else capacity
        layers = [(layer.self_attn.new_cache(memory.shape[0], capacity), layer.multihead_attn.static_cache(memory))
                  for layer in self.transformer.decoder.layers]
        return DecoderCache(layers, memory_key_mask)

    def decode_step(self, tokens: torch.Tensor, cache: DecoderCache) -> torch.Tensor:
        """Logits ``(batch, n_new, tgt_vocab)`` for ``tokens`` ``(batch, n_new)`` (usually ``n_new = 1``) at positions
        ``cache.length, …``; their keys and values are appended to ``cache``. Equal to the matching positions of
        :meth:`decode` on the whole prefix (tested), at a cost per new token that grows only linearly with the
        prefix length. Eval mode (no dropout) assumed.

        Raises:
            ValueError: the cache is full.
        """
        self._check_tokens("tokens", tokens, self.tgt_vocab)
        if cache.length + tokens.shape[1] > cache.capacity:
            raise ValueError(f"the cache holds {cache.capacity} positions; {cache.length} used, "
                             f"{tokens.shape[1]} more requested")
        x = self.embed_tgt(tokens, offset=cache.length)
        out = self.transformer.decoder(x, None, memory_key_mask=cache.memory_key_mask, tgt_is_causal=True,
                                       cache=cache)
        return self.generator(out)


@torch.no_grad()
def greedy_decode(
    model: Seq2SeqTransformer,
    src: torch.Tensor,
    max_len: int,
    bos_id: int,
    eos_id: int | None = None,
    *,
    src_key_mask: torch.Tensor | None = None,
    pad_id: int | None = None,
    use_cache: bool = True,
    return_logits: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Greedy autoregressive decoding: start from ``BOS``, append the arg-max token, repeat (chapter 5).

    With ``use_cache=True`` each step feeds only the newest token through the decoder: every self-attention
    layer keeps the keys and values of past positions (a :class:`DecoderCache`), and the cross-attention keys and
    values of the encoder memory are computed once. With ``use_cache=False`` every step re-runs the decoder on
    the whole prefix. Both give the same tokens (tested). The model is put in eval mode for the call.

    Args:
        model: a :class:`Seq2SeqTransformer`.
        src: source ids ``(batch, n_src)``.
        max_len: number of tokens to generate after ``BOS`` (at most; fewer if every row has produced
            ``eos_id``).
        bos_id: the start token. eos_id: the end token, or None to always generate ``max_len`` tokens (for
            timing).
        src_key_mask: ``(batch, n_src)``, True = real token; default ``src != model.pad_id``.
        pad_id: written after a row's ``EOS`` (default ``model.pad_id``, or ``eos_id`` when that is None).
        use_cache: decode incrementally with the key/value cache.
        return_logits: also return the logits of every step.

    Returns:
        ``tokens`` ``(batch, 1 + steps)`` starting with ``BOS``; with ``return_logits``, also
        ``logits`` ``(batch, steps, tgt_vocab)`` (step ``t``'s logits are those that chose ``tokens[:, t + 1]``).
    """
    if not isinstance(model, Seq2SeqTransformer):
        raise TypeError(f"greedy_decode expects a Seq2SeqTransformer, got {type(model).__name__}")
    if not isinstance(max_len, int) or max_len < 1:
        raise ValueError(f"max_len must be a positive integer, got {max_len!r}")
    was_training = model.training
    model.eval()
    mask = model.src_key_mask_for(src) if src_key_mask is None else src_key_mask
    memory = model.encode(src, mask)
    batch = src.shape[0]
    fill = pad_id if pad_id is not None else (model.pad_id if model.pad_id is not None else eos_id)
    tokens = torch.full((batch, 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(batch, dtype=torch.bool, device=src.device)
    cache = model.new_cache(memory, mask, capacity=max_len + 1) if use_cache else None
    all_logits = []
    for _ in range(max_len):
        if cache is not None:
            logits = model.decode_step(tokens[:, -1:], cache)[:, -1]
        else:
            logits = model.decode(tokens, memory, memory_key_mask=mask)[:, -1]
        nxt = logits.argmax(dim=-1)
        if eos_id is not None and fill is not None:
            nxt = torch.where(done, torch.full_like(nxt, fill), nxt)
        tokens = torch.cat([tokens, nxt[:, None]], dim=1)
        if return_logits:
            all_logits.append(logits)
        if eos_id is not None:
            done |= nxt == eos_id
            if bool(done.all()):
                break
    model.train(was_training)
    if return_logits:
        return tokens, torch.stack(all_logits, dim=1)
    return tokens
