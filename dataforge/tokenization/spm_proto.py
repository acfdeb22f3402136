"""Reading a sentencepiece ``ModelProto``: what the native and word-by-word encoders check
before they stand in for sentencepiece."""

from __future__ import annotations

from typing import Any

__all__ = ["keeps_text", "parse_model"]


def parse_model(model_proto: bytes) -> Any:
    """The ``sentencepiece_model_pb2.ModelProto`` of a serialized model."""
    from sentencepiece import sentencepiece_model_pb2 as model_pb2

    proto = model_pb2.ModelProto()
    proto.ParseFromString(model_proto)
    return proto


def keeps_text(proto: Any) -> bool:
    """Whether the model's normalizer changes nothing but spelling spaces U+2581 as word
    prefixes: the ``identity`` rule, no dummy prefix, no whitespace folding."""
    norm = proto.normalizer_spec
    return (
        norm.name == "identity"
        and not norm.precompiled_charsmap
        and not norm.add_dummy_prefix
        and not norm.remove_extra_whitespaces
        and norm.escape_whitespaces
        and not proto.trainer_spec.treat_whitespace_as_suffix
    )
