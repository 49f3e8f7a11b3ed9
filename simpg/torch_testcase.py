"""What ``simpg.testing``'s bases take from torch's test utilities, and how they host them.

Note [torch assertEqual]
Tests written for torch's base compare tensors, lists and numbers with torch's assertEqual, and
torch's run_tests() refuses a class that is not torch's TestCase, so the bases subclass it.
What that brings is what torch's own DTensor bases (MultiProcessTestCase,
MultiThreadedTestCase) bring, the same verdicts included: setUp seeds the RNGs, honors torch's
disabled- and slow-test lists and checks that the test did not leak a torch function mode;
run() imports torch._dynamo (about 2 s, once per process).
But importing torch's common_utils has process-wide effects that ``import simpg`` (which
imports simpg.testing) must not have: it disables setting torch.backends flags outside their
flags() contexts, patches TorchScript's call, loads its own hypothesis profile, and takes
about 0.5 s. So the classes are defined on unittest's TestCase and put on torch's (their
``__bases__`` replaced, which re-derives every subclass's MRO) when the first test class is
derived from them: by then the test's own module is being imported, and it is a torch-style
test file.

Note [device-type tests on simulated ranks]
torch's instantiate_device_type_tests makes TestXCPU(CPUTestBase, TestX): its test methods
(``instantiated_test``) set ``self.precision`` / ``self.rel_tol`` from ``precisionOverride`` /
``toleranceOverride`` and restore them after, and DeviceTypeTestBase keeps both in a
class-level ``threading.local`` (``_tls``) whose attributes exist only on the thread that
imported the module. torch's MultiThreadedTestCase gives each rank thread an instance with a
fresh ``_tls`` holding TestCase's defaults; we do the same on each rank's copy of the test,
with the caller's values (its setUp may have set them): the override then applies per rank,
and torch's assertEqual, reading ``self.precision``, honors it on every rank.
"""

from __future__ import annotations

import threading
import unittest
from collections.abc import Callable
from typing import Any


def base_on_torch_test_case(base: type) -> None:
    """Put ``base``, a direct subclass of unittest's TestCase, on torch's ``TestCase``
    (Note [torch assertEqual]); idempotent.

    >>> import unittest
    >>> class Base(unittest.TestCase): pass
    >>> base_on_torch_test_case(Base)
    >>> [c.__name__ for c in Base.__mro__[1:3]], Base.__mro__[1].__module__
    (['TestCase', 'TestCase'], 'torch.testing._internal.common_utils')
    """
    from torch.testing._internal.common_utils import TestCase

    if not issubclass(base, TestCase):
        base.__bases__ = (TestCase,)


def thread_local_state(test: unittest.TestCase) -> Callable[[Any], None]:
    """What each rank's copy of ``test`` needs of the caller's thread-local state (Note
    [device-type tests on simulated ranks]): a function that gives it to one copy.

    >>> import unittest
    >>> hand_over = thread_local_state(unittest.TestCase())  # not a device-type test
    >>> hand_over(object())  # nothing to hand over
    """
    tls = getattr(type(test), "_tls", None)
    if not isinstance(tls, threading.local):
        return lambda mine: None
    from torch.testing._internal.common_utils import TestCase  # imported with _tls's module

    # TestCase's defaults where the calling thread never set them (it did not import torch)
    values = {name: getattr(tls, name, getattr(TestCase, "_" + name))
              for name in ("precision", "rel_tol")}

    def hand_over(mine: Any) -> None:
        mine._tls = threading.local()
        for name, value in values.items():
            setattr(mine._tls, name, value)

    return hand_over


__all__ = ["base_on_torch_test_case", "thread_local_state"]
