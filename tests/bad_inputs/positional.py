"""Bad inputs for positional.py: sizes are integers, even where they pair up; the base of the frequencies is
positive; the encoding is added only to floating-point embeddings."""

import torch

from attention_course.positional import SinusoidalPositionalEncoding, apply_rope, rope_angles, sinusoidal_encoding
from bad_inputs import case

PE = SinusoidalPositionalEncoding(4, max_len=8)
X = torch.zeros(1, 3, 4)

CASES = [
    case(sinusoidal_encoding, lambda: sinusoidal_encoding(-1, 4), ValueError, arg="n",
         id="positional.sinusoidal_encoding-negative-n"),
    case(sinusoidal_encoding, lambda: sinusoidal_encoding(3, 5), ValueError, arg="d_model", says="even",
         id="positional.sinusoidal_encoding-odd"),
    case(sinusoidal_encoding, lambda: sinusoidal_encoding(3.0, 4), TypeError, arg="n",
         id="positional.sinusoidal_encoding-float-n"),
    case(sinusoidal_encoding, lambda: sinusoidal_encoding(3, 4, base=0), ValueError, arg="base",
         id="positional.sinusoidal_encoding-base-zero"),
    case(sinusoidal_encoding, lambda: sinusoidal_encoding(3, 4, base=float("nan")), ValueError, arg="base",
         id="positional.sinusoidal_encoding-base-nan"),
    case(sinusoidal_encoding, lambda: sinusoidal_encoding(3, 4, offset=-2), ValueError, arg="offset",
         id="positional.sinusoidal_encoding-offset"),
    case(sinusoidal_encoding, lambda: sinusoidal_encoding(3, 4, dtype=torch.long), TypeError, arg="dtype",
         id="positional.sinusoidal_encoding-int-dtype"),
    case(SinusoidalPositionalEncoding, lambda: SinusoidalPositionalEncoding(0), ValueError, arg="d_model",
         id="positional.SinusoidalPositionalEncoding-zero"),
    case(SinusoidalPositionalEncoding, lambda: SinusoidalPositionalEncoding(4, max_len=-3), ValueError,
         arg="max_len", id="positional.SinusoidalPositionalEncoding-max-len"),
    case(SinusoidalPositionalEncoding, lambda: SinusoidalPositionalEncoding(4, dropout=1.5), ValueError,
         arg="dropout", id="positional.SinusoidalPositionalEncoding-dropout"),
    case(SinusoidalPositionalEncoding, lambda: PE(torch.zeros(1, 3, 4, dtype=torch.long)), TypeError, arg="x",
         says="floating", id="positional.SinusoidalPositionalEncoding-int-input"),
    case(SinusoidalPositionalEncoding, lambda: PE(X[0]), ValueError, arg="x", says="3-D",
         id="positional.SinusoidalPositionalEncoding-2d"),
    case(SinusoidalPositionalEncoding, lambda: PE(torch.zeros(1, 3, 6)), ValueError, arg="x", says="d_model=4",
         id="positional.SinusoidalPositionalEncoding-width"),
    case(SinusoidalPositionalEncoding, lambda: PE(X, offset=6), ValueError, arg="max_len",
         id="positional.SinusoidalPositionalEncoding-past-max-len"),
    case(SinusoidalPositionalEncoding, lambda: PE(X, offset=1.0), TypeError, arg="offset",
         id="positional.SinusoidalPositionalEncoding-float-offset"),
    case(rope_angles, lambda: rope_angles(3, 3), ValueError, arg="d", says="even", id="positional.rope_angles-odd"),
    case(rope_angles, lambda: rope_angles(3, 4, positions=torch.arange(4)), ValueError, arg="positions",
         says="(n,)", id="positional.rope_angles-positions-shape"),
    case(rope_angles, lambda: rope_angles(3, 4, positions=[0, 1, 2]), TypeError, arg="positions",
         id="positional.rope_angles-positions-list"),
    case(rope_angles, lambda: rope_angles(2, 4, positions=torch.tensor([True, False])), TypeError, arg="positions",
         id="positional.rope_angles-positions-bool"),
    case(rope_angles, lambda: rope_angles(3, 4, base=-10.0), ValueError, arg="base", id="positional.rope_angles-base"),
    case(apply_rope, lambda: apply_rope(torch.arange(6).reshape(3, 2)), TypeError, arg="x", says="floating",
         id="positional.apply_rope-int"),
    case(apply_rope, lambda: apply_rope(torch.zeros(4)), ValueError, arg="x", id="positional.apply_rope-1d"),
    case(apply_rope, lambda: apply_rope(torch.zeros(3, 5)), ValueError, arg="d", says="even",
         id="positional.apply_rope-odd"),
    case(apply_rope, lambda: apply_rope(torch.zeros(3, 4), positions=torch.arange(3, device="meta")), ValueError,
         arg="positions", says="device", id="positional.apply_rope-devices"),
    case(apply_rope, lambda: apply_rope([[0.0, 1.0]]), TypeError, arg="x", id="positional.apply_rope-list"),
]

CASES += [
    case(SinusoidalPositionalEncoding, lambda: PE(torch.zeros(1, 3, 4, device="meta")), ValueError, arg="x",
         says="device", id="positional.SinusoidalPositionalEncoding-device"),
    case(sinusoidal_encoding, lambda: sinusoidal_encoding(3, 4, offset=10**20), ValueError, arg="offset",
         id="positional.sinusoidal_encoding-huge-offset"),
    case(rope_angles, lambda: rope_angles(2, 4, positions=torch.zeros(2), device="meta"), ValueError,
         arg="positions", says="device", id="positional.rope_angles-device-and-positions"),
]
