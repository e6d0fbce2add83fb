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
The stacks :class:`TransformerEncoder`, :class:`TransformerDecoder` and :class:`DecoderCache` live in
:mod:`attention_course.layers` and are importable from here too.

At the edges: empty batches and sequences give empty results; a target position with no source position to attend
to (``n_src = 0`` or every source position padding) gets a zero cross-attention output, never NaN.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import nn

from ._checks import (
    as_index,
    check_device,
    check_dtype,
    check_flag,
    check_instance,
    check_int,
    check_real,
    check_tensor,
    check_token_ids,
    describe,
)
from .layers import (
    Activation,
    DecoderCache,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
    check_sequence,
)
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

    def __post_init__(self) -> None:
        for name in ("encoder", "decoder_self", "cross"):
            check_instance(name, getattr(self, name), list)


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
        check_int("num_encoder_layers", num_encoder_layers)
        check_int("num_decoder_layers", num_decoder_layers)
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

        At the edges: ``batch = 0``, ``n_src = 0`` or ``n_tgt = 0`` give what ``nn.Transformer`` gives (empty
        results; with no source position, zero cross-attention outputs); a fully masked row gives zeros, not NaN.
        """
        like = self.encoder.layers[0].linear1.weight
        check_sequence("src", src, self.d_model, self.batch_first, like)
        check_sequence("tgt", tgt, self.d_model, self.batch_first, like)
        check_flag("src_is_causal", src_is_causal)
        check_flag("tgt_is_causal", tgt_is_causal)
        if attn_maps is not None:
            check_instance("attn_maps", attn_maps, AttentionMaps)
        _check_same_batch(src, tgt, None if src.ndim == 2 else 0 if self.batch_first else 1,
                          " (batch_first)" if self.batch_first else " (sequence-first)")
        memory = self.encoder(src, mask=src_mask, src_key_mask=src_key_mask, is_causal=src_is_causal,
                              attn_weights=None if attn_maps is None else attn_maps.encoder)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask, tgt_key_mask=tgt_key_mask,
                            memory_key_mask=memory_key_mask, tgt_is_causal=tgt_is_causal,
                            self_weights=None if attn_maps is None else attn_maps.decoder_self,
                            cross_weights=None if attn_maps is None else attn_maps.cross)



def _check_same_batch(src: torch.Tensor, tgt: torch.Tensor, batch_dim: int | None, layout: str = "") -> None:
    """``src`` and ``tgt`` must be one batch: as many dimensions, and as many rows along ``batch_dim`` (None: an
    unbatched pair, which has no batch dimension)."""
    if src.ndim != tgt.ndim or (batch_dim is not None and src.shape[batch_dim] != tgt.shape[batch_dim]):
        raise ValueError(f"src and tgt must have the same batch size, got src {tuple(src.shape)} and tgt "
                         f"{tuple(tgt.shape)}{layout}")


# ------------------------------------------------------------------------------------------ the whole model
def param_count(model: nn.Module) -> int:
    """Number of distinct parameters (a tied matrix counts once); 0 for a module without parameters."""
    check_instance("model", model, nn.Module)
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
        src_vocab = check_int("src_vocab", src_vocab)
        tgt_vocab = src_vocab if tgt_vocab is None else check_int("tgt_vocab", tgt_vocab)
        if check_flag("share_embeddings", share_embeddings) and tgt_vocab != src_vocab:
            raise ValueError(f"share_embeddings=True needs tgt_vocab == src_vocab: tgt_vocab must equal {src_vocab}, "
                             f"got {tgt_vocab}")
        d_model, max_len = check_int("d_model", d_model), check_int("max_len", max_len)
        check_real("dropout", dropout, low=0.0, high=1.0)
        check_flag("tie_output", tie_output)
        if pad_id is not None:  # a source token and, after EOS, a target token
            pad_id = check_int("pad_id", pad_id, low=0, high=min(src_vocab, tgt_vocab) - 1)
        device = None if device is None else check_device("device", device)
        dtype = None if dtype is None else check_dtype("dtype", dtype)
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
    def _check_tokens(self, name: str, ids: object, vocab: int, offset: int = 0) -> None:
        """Token ids ``(batch, n)`` in ``[0, vocab)`` on the model's device, at positions below ``max_len``."""
        check_tensor(name, ids, kind="integer", ndim=2, layout="of token ids (batch, n)")
        device = self.src_embed.weight.device
        if ids.device != device:  # before reading the ids
            raise ValueError(f"{name} must be on the model's device {device}, got {describe(ids)}")
        if offset + ids.shape[1] > self.positions.max_len:
            raise ValueError(f"{name} must have at most {self.positions.max_len - offset} positions (max_len="
                             f"{self.positions.max_len}, from position {offset}), got shape {tuple(ids.shape)}")
        if device.type != "meta":  # a meta tensor has no ids to read
            check_token_ids(name, ids, vocab)

    def src_key_mask_for(self, src: torch.Tensor, given: torch.Tensor | None = None) -> torch.Tensor | None:
        """The source key mask a call uses: ``given`` when it is not None, else ``src != pad_id`` (True = real
        token), or None when the model has no ``pad_id``."""
        check_tensor("src", src, kind="integer", ndim=2, layout="of token ids (batch, n_src)")
        if given is not None:
            return given
        return None if self.pad_id is None else src != self.pad_id

    def _check_pair(self, src: torch.Tensor, tgt: torch.Tensor) -> None:
        """Source and target ids of one teacher-forced batch."""
        self._check_tokens("src", src, self.src_vocab)
        self._check_tokens("tgt", tgt, self.tgt_vocab)
        _check_same_batch(src, tgt, 0)

    def embed_src(self, src: torch.Tensor) -> torch.Tensor:
        """``(batch, n) ids -> (batch, n, d_model)``: ``Emb(src)·√d_model + PE`` (then dropout). At the edges:
        ``batch = 0`` or ``n = 0`` give an empty tensor."""
        self._check_tokens("src", src, self.src_vocab)
        return self._embed(self.src_embed, src)

    def embed_tgt(self, tgt: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """As :meth:`embed_src` for target ids at positions ``offset, offset + 1, …`` (``offset + n ≤ max_len``)."""
        offset = check_int("offset", offset, low=0)
        self._check_tokens("tgt", tgt, self.tgt_vocab, offset)
        return self._embed(self.tgt_embed, tgt, offset)

    def _embed(self, embedding: nn.Embedding, ids: torch.Tensor, offset: int = 0) -> torch.Tensor:
        return self.positions(embedding(as_index(ids)) * self.scale, offset)  # any integer dtype of ids

    def encode(self, src: torch.Tensor, src_key_mask: torch.Tensor | None = None) -> torch.Tensor:
        """The encoder's output (the *memory*) ``(batch, n_src, d_model)`` for source ids ``(batch, n_src)``.
        ``src_key_mask`` (boolean, True = real token) defaults to ``src != pad_id``. At the edges: ``batch = 0``
        or ``n_src = 0`` give an empty memory; a fully padded row is encoded without NaN."""
        self._check_tokens("src", src, self.src_vocab)
        mask = self.src_key_mask_for(src, src_key_mask)
        return self.transformer.encoder(self._embed(self.src_embed, src), src_key_mask=mask)

    def decode(
        self,
        tgt: torch.Tensor,
        memory: torch.Tensor,
        memory_key_mask: torch.Tensor | None = None,
        tgt_key_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits ``(batch, n_tgt, tgt_vocab)`` for every target prefix, recomputed in full (causal mask).

        Position ``t`` of the output predicts token ``t + 1`` from tokens ``0..t`` of ``tgt`` (ids,
        ``(batch, n_tgt)``) and from ``memory`` (from :meth:`encode`). At the edges: ``n_tgt = 0`` gives
        ``(batch, 0, tgt_vocab)``; with ``n_src = 0`` the cross-attention contributes zeros."""
        self._check_tokens("tgt", tgt, self.tgt_vocab)
        out = self.transformer.decoder(self._embed(self.tgt_embed, tgt), memory, tgt_key_mask=tgt_key_mask,
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
        ``src_key_mask`` defaults to ``src != pad_id`` and also masks the cross-attention. At the edges: as
        :meth:`encode` and :meth:`decode`."""
        self._check_pair(src, tgt)
        mask = self.src_key_mask_for(src, src_key_mask)
        return self.decode(tgt, self.encode(src, mask), memory_key_mask=mask, tgt_key_mask=tgt_key_mask)

    @torch.no_grad()
    def attention_maps(
        self, src: torch.Tensor, tgt: torch.Tensor, src_key_mask: torch.Tensor | None = None
    ) -> AttentionMaps:
        """Every layer's per-head attention weights for a teacher-forced pass (eval mode; see
        :class:`AttentionMaps`). Encoder self-attention, decoder causal self-attention and cross-attention,
        where the queries come from the decoder and the keys and values from the encoder."""
        self._check_pair(src, tgt)
        mask = self.src_key_mask_for(src, src_key_mask)
        was_training = self.training
        self.eval()
        maps = AttentionMaps()
        try:
            self.transformer(self._embed(self.src_embed, src), self._embed(self.tgt_embed, tgt), src_key_mask=mask,
                             memory_key_mask=mask, tgt_is_causal=True, attn_maps=maps)
        finally:
            self.train(was_training)
        return maps

    # ----------------------------------------------------------------------------- incremental decoding
    def new_cache(
        self, memory: torch.Tensor, memory_key_mask: torch.Tensor | None = None, capacity: int | None = None
    ) -> DecoderCache:
        """An empty :class:`DecoderCache` for decoding against ``memory`` ``(batch, n_src, d_model)``: every decoder
        layer's cross-attention keys and values are projected here, once (chapter 6 counts the saving).
        ``memory_key_mask``: boolean ``(batch, n_src)``, True = a real token. ``capacity`` (default and at most
        ``max_len``) is the most target positions it will hold. At the edges: ``n_src = 0`` is accepted (decoding
        then gets zero cross-attention outputs)."""
        check_tensor("memory", memory, ndim=3, layout="(batch, n_src, d_model)")
        check_sequence("memory", memory, self.d_model, True, self.src_embed.weight)
        if memory_key_mask is not None:
            check_tensor("memory_key_mask", memory_key_mask, kind="bool", layout="(batch, n_src) (True = a real token)")
            if memory_key_mask.shape != memory.shape[:2] or memory_key_mask.device != memory.device:
                raise ValueError(f"memory_key_mask must have memory's (batch, n_src) = {tuple(memory.shape[:2])} and "
                                 f"device {memory.device}, got {describe(memory_key_mask)}")
        capacity = self.positions.max_len if capacity is None else capacity
        capacity = check_int("capacity", capacity, high=self.positions.max_len)
        layers = [(layer.self_attn.new_cache(memory.shape[0], capacity), layer.multihead_attn.static_cache(memory))
                  for layer in self.transformer.decoder.layers]
        return DecoderCache(layers, memory_key_mask, owner=id(self))

    def decode_step(self, tokens: torch.Tensor, cache: DecoderCache) -> torch.Tensor:
        """Logits ``(batch, n_new, tgt_vocab)`` for ``tokens`` ``(batch, n_new)`` (usually ``n_new = 1``) at positions
        ``cache.length, …``; their keys and values are appended to ``cache``. Equal to the matching positions of
        :meth:`decode` on the whole prefix (tested), at a cost per new token that grows only linearly with the
        prefix length. Eval mode (no dropout) assumed. At the edges: ``n_new = 0`` gives ``(batch, 0, tgt_vocab)``
        and leaves the cache as it was.

        Raises:
            TypeError, ValueError: ``tokens`` as :meth:`decode`'s ``tgt``; a full cache, or one made by another model
            or for another batch (a refused call leaves the cache as it was).
        """
        check_instance("cache", cache, DecoderCache)
        if cache.owner is not None and cache.owner != id(self):
            raise ValueError("cache must come from this model's new_cache, got a DecoderCache made by another model")
        check_tensor("tokens", tokens, kind="integer", ndim=2, layout="of token ids (batch, n_new)")
        n_layers = len(self.transformer.decoder.layers)
        if len(cache.layers) != n_layers:
            raise ValueError(f"cache must hold one (self, cross) pair per decoder layer ({n_layers}), got "
                             f"{len(cache.layers)} (a cache made by another model?)")
        batch, n_src = cache.layers[0][0].keys.shape[0], cache.layers[0][1].keys.shape[2]
        if tokens.shape[0] != batch:
            raise ValueError(f"tokens must have the cache's batch size {batch}, got shape {tuple(tokens.shape)}")
        mask = cache.memory_key_mask
        if isinstance(mask, torch.Tensor) and mask.shape != (batch, n_src):  # its kind: checked by the layers
            raise ValueError(f"cache.memory_key_mask must have shape (batch, n_src) = {(batch, n_src)}, got "
                             f"{describe(mask)}")
        if cache.length + tokens.shape[1] > cache.capacity:
            raise ValueError(f"tokens must fit the cache: it holds {cache.capacity} positions and {cache.length} are "
                             f"used, so at most {cache.capacity - cache.length} more; got {tokens.shape[1]}")
        self._check_tokens("tokens", tokens, self.tgt_vocab, cache.length)
        x = self._embed(self.tgt_embed, tokens, offset=cache.length)
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

    At the edges: ``batch = 0`` gives ``(0, 2)`` tokens when ``eos_id`` is given (an empty batch is done after one
    step), ``(0, 1 + max_len)`` otherwise; ``n_src = 0`` decodes from zero cross-attention outputs.
    """
    check_instance("model", model, Seq2SeqTransformer)
    max_len = check_int("max_len", max_len)
    if max_len > model.positions.max_len:
        raise ValueError(f"max_len must be at most the model's max_len={model.positions.max_len} (the positions it "
                         f"encodes), got {max_len}")
    ids = {"bos_id": bos_id, "eos_id": eos_id, "pad_id": pad_id}
    bos_id, eos_id, pad_id = (None if v is None else check_int(k, v, low=0, high=model.tgt_vocab - 1)
                              for k, v in ids.items())
    if bos_id is None:
        raise TypeError("bos_id must be an integer, got None")
    use_cache, return_logits = check_flag("use_cache", use_cache), check_flag("return_logits", return_logits)
    mask = model.src_key_mask_for(src, src_key_mask)
    was_training = model.training
    model.eval()
    try:
        memory = model.encode(src, mask)
        batch = src.shape[0]
        fill = pad_id if pad_id is not None else (model.pad_id if model.pad_id is not None else eos_id)
        tokens = torch.full((batch, 1), bos_id, dtype=torch.long, device=src.device)
        done = torch.zeros(batch, dtype=torch.bool, device=src.device)
        cache = model.new_cache(memory, mask, capacity=max_len) if use_cache else None
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
    finally:
        model.train(was_training)
    if return_logits:
        return tokens, torch.stack(all_logits, dim=1)
    return tokens
