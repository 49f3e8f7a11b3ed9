"""Communication: the collectives dtensor issues, out of place and with uneven sizes, over any
process group (``collectives``: eager and prepared; ``functional``: the traced forms;
``capabilities``: what each backend runs natively; ``handles``: in-flight results;
``debug_mode``: ``CommDebugMode``, counting and tracing them). Layers above import from here."""

from dtensor.comm.capabilities import CAPABILITIES, PORTABLE, Capabilities, capabilities
from dtensor.comm.handles import AsyncCollectiveError, AsyncCollectiveTensor, Handle
from dtensor.comm.collectives import (Prepared, ReduceOpName, all_gather, all_gather_cat,
                                      all_gather_in_place,
                                      all_reduce, all_to_all, all_to_all_single,
                                      prepare_all_gather_cat, prepare_all_reduce,
                                      prepare_all_to_all_single, prepare_reduce_scatter_cat,
                                      reduce_scatter, reduce_scatter_cat)

__all__ = [
    "CAPABILITIES", "PORTABLE", "Capabilities", "capabilities",
    "AsyncCollectiveError", "AsyncCollectiveTensor", "Handle",
    "Prepared", "ReduceOpName", "all_gather", "all_gather_cat", "all_gather_in_place",
    "all_reduce", "all_to_all",
    "all_to_all_single", "prepare_all_gather_cat", "prepare_all_reduce",
    "prepare_all_to_all_single", "prepare_reduce_scatter_cat", "reduce_scatter",
    "reduce_scatter_cat",
]
