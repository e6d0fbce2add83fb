"""Bad inputs for source.py."""

from attention_course.source import show_source, source_text
from bad_inputs import case

CASES = [
    case(source_text, lambda: source_text(3), TypeError, arg="obj", says="function, method or class",
         id="source.source_text-int"),
    case(source_text, lambda: source_text(len), TypeError, arg="obj", says="builtin_function_or_method",
         id="source.source_text-builtin"),
    case(show_source, lambda: show_source("softmax"), TypeError, arg="obj", id="source.show_source-name"),
]
