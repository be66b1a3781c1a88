"""The embedder as a Triton Python-backend model, for the official-image renderings.

Same inputs, outputs and vectors as the PyTriton service of the local profile
(``faultday_refstack.embedder``), so the seeded corpus stays valid.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

CONFIG_PBTXT = """\
name: "embedder"
backend: "python"
max_batch_size: 64
input [ { name: "TEXT", data_type: TYPE_STRING, dims: [ 1 ] } ]
output [ { name: "EMBEDDING", data_type: TYPE_FP32, dims: [ 384 ] } ]
dynamic_batching { max_queue_delay_microseconds: 2000 }
instance_group [ { kind: KIND_CPU, count: 1 } ]
"""


def _refstack_file(*parts: str) -> Path:
    """A file of the reference stack, found without importing it (it runs only as processes)."""
    spec = importlib.util.find_spec("faultday_refstack")
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError("faultday_refstack is not installed beside faultday")
    return Path(spec.origin).parent.joinpath(*parts)


_HASHING = _refstack_file("embedder", "hashing.py").read_text()

MODEL_PY = (
    _HASHING
    + '''

import triton_python_backend_utils as pb_utils  # noqa: E402  (provided by tritonserver)


class TritonPythonModel:
    """KServe v2 model 'embedder': TEXT (BYTES [-1, 1]) -> EMBEDDING (FP32 [-1, 384])."""

    def execute(self, requests):
        responses = []
        for request in requests:
            raw = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy().reshape(-1)
            texts = [x.decode("utf-8", "replace") if isinstance(x, bytes) else str(x) for x in raw]
            out = pb_utils.Tensor("EMBEDDING", embed(texts, DIM))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
'''
)
