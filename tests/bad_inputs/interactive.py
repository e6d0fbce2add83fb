"""Bad inputs for interactive.py: head sizes, keys and values that do not fit, maps of the wrong shape, labels
that do not match them, names that cannot be an HTML id, and frame positions out of range."""

import torch

from attention_course.interactive import (
    Interactive,
    circle_explorer,
    head_explorer,
    online_softmax_explorer,
    temperature_explorer,
)
from bad_inputs import case

_MAPS = [torch.full((1, 2, 3, 3), 1 / 3)]

CASES = [
    case(temperature_explorer, lambda: temperature_explorer(d_ks=(16,)), ValueError, arg="d_ks",
         id="interactive.temperature_explorer-one-size"),
    case(temperature_explorer, lambda: temperature_explorer(d_ks=(16.0, 64)), TypeError, arg="d_ks",
         id="interactive.temperature_explorer-float"),
    case(temperature_explorer, lambda: temperature_explorer(n=1), ValueError, arg="n",
         id="interactive.temperature_explorer-n"),
    case(temperature_explorer, lambda: temperature_explorer(name="a b"), ValueError, arg="name",
         id="interactive.temperature_explorer-name"),
    case(circle_explorer, lambda: circle_explorer(values=((1.0, 0.0),)), ValueError, arg="values",
         id="interactive.circle_explorer-values"),
    case(circle_explorer, lambda: circle_explorer(lengths=(0.0, 1.0)), ValueError, arg="lengths",
         id="interactive.circle_explorer-lengths"),
    case(head_explorer, lambda: head_explorer([], [["a"]]), ValueError, arg="maps",
         id="interactive.head_explorer-empty"),
    case(head_explorer, lambda: head_explorer([torch.ones(2, 3, 3)], [["a"] * 3]), ValueError, arg="maps",
         id="interactive.head_explorer-3d"),
    case(head_explorer, lambda: head_explorer(_MAPS, [["a", "b"]]), ValueError, arg="query_labels",
         id="interactive.head_explorer-labels"),
    case(head_explorer, lambda: head_explorer(_MAPS, [["a"] * 3], [["k"] * 2]), ValueError, arg="key_labels",
         id="interactive.head_explorer-key-labels"),
    case(head_explorer, lambda: head_explorer(_MAPS, [["a"] * 3], start=(0, 2)), ValueError, arg="start",
         id="interactive.head_explorer-start"),
    case(head_explorer, lambda: head_explorer([torch.full((1, 2, 3, 3), float("nan"))], [["a"] * 3]), ValueError,
         arg="maps", id="interactive.head_explorer-nan"),
    case(head_explorer, lambda: head_explorer(_MAPS, [[1, 2, 3]]), TypeError, arg="query_labels",
         id="interactive.head_explorer-labels-int"),
    case(temperature_explorer, lambda: temperature_explorer(d_ks=(16, 16)), ValueError, arg="d_ks",
         id="interactive.temperature_explorer-same"),
    case(circle_explorer, lambda: circle_explorer(values=5), TypeError, arg="values",
         id="interactive.circle_explorer-values-int"),
    case(online_softmax_explorer, lambda: online_softmax_explorer([1.0, 2.0], [1.0]), ValueError, arg="values",
         id="interactive.online_softmax_explorer-values"),
    case(online_softmax_explorer, lambda: online_softmax_explorer(block=0), ValueError, arg="block",
         id="interactive.online_softmax_explorer-block"),
    case(Interactive, lambda: online_softmax_explorer().frame(99), ValueError, arg="positions",
         id="interactive.Interactive-frame"),
    case(Interactive, lambda: online_softmax_explorer().frame(0, 0), ValueError, arg="positions",
         id="interactive.Interactive-positions"),
]
