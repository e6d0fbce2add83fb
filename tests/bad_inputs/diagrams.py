"""Bad inputs for diagrams.py: axes that are not Axes, and head or cache counts out of range."""

import matplotlib

matplotlib.use("Agg")
from attention_course.diagrams import (  # noqa: E402
    Sketch,
    encoder_decoder,
    factor_product,
    gpt_block,
    kv_cache_step,
    multihead_split,
    softmax_shapes,
    stacked_heads,
    tiled_pass,
)
from bad_inputs import case  # noqa: E402

CASES = [
    case(tiled_pass, lambda: tiled_pass(tiles=1), ValueError, arg="tiles", id="diagrams.tiled_pass-1"),
    case(tiled_pass, lambda: tiled_pass(tiles=3, current=4), ValueError, arg="current",
         id="diagrams.tiled_pass-current"),
    case(Sketch, lambda: Sketch("left", 4.0, 3.0, (4, 3)), TypeError, arg="ax", id="diagrams.Sketch-ax"),
    case(softmax_shapes, lambda: softmax_shapes(ax=1), TypeError, arg="ax", id="diagrams.softmax_shapes-ax"),
    case(factor_product, lambda: factor_product(ax="left"), TypeError, arg="ax", id="diagrams.factor_product-ax"),
    case(stacked_heads, lambda: stacked_heads(heads=1), ValueError, arg="heads", id="diagrams.stacked_heads-1"),
    case(stacked_heads, lambda: stacked_heads(heads="4"), TypeError, arg="heads", id="diagrams.stacked_heads-str"),
    case(multihead_split, lambda: multihead_split(heads=7), ValueError, arg="heads",
         id="diagrams.multihead_split-7"),
    case(multihead_split, lambda: multihead_split(ax=[]), TypeError, arg="ax", id="diagrams.multihead_split-ax"),
    case(encoder_decoder, lambda: encoder_decoder(ax="left"), TypeError, arg="ax", id="diagrams.encoder_decoder-ax"),
    case(kv_cache_step, lambda: kv_cache_step(cached=0), ValueError, arg="cached", id="diagrams.kv_cache_step-0"),
    case(kv_cache_step, lambda: kv_cache_step(cached=2.0), TypeError, arg="cached",
         id="diagrams.kv_cache_step-float"),
    case(gpt_block, lambda: gpt_block(ax="left"), TypeError, arg="ax", id="diagrams.gpt_block-ax"),
]
