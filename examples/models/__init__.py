"""In-project models built with random init (no downloads), each with its tensor-parallel plan
written as data: ``examples.models.llama`` (a Llama-style decoder) and ``examples.models.bert``
(a BERT-style encoder with a masked-LM head).

>>> import torch
>>> from examples.models import llama
>>> model = llama.Llama(llama.PRESETS["tiny"])
>>> model(torch.zeros(2, 8, dtype=torch.long)).shape
torch.Size([2, 8, 1000])
"""

from examples.models import bert, llama

__all__ = ["bert", "llama"]
