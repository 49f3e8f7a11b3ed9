"""``simpg.testing``: torch's DTensor test base, run on simulated ranks in one process.

A test class written for torch's
``torch.testing._internal.distributed._tensor.common_dtensor.DTensorTestBase`` runs here by
changing its base-class import: each test method runs on ``world_size`` simpg ranks (threads)
with the default process group initialised, ``self.rank`` is the calling rank,
``build_device_mesh()`` returns a mesh of the DTensor library the test module imports (ours,
``dtensor``, or torch's: Note [choosing the DTensor library]), and ``self.run_subtests`` runs a
whole grid, reporting every failing combination with its rank. The bases are torch's
``TestCase`` too, so torch's ``run_tests()`` runs a ported file, and torch's op-database
classes (``instantiate_device_type_tests``, ``@ops``, ``precisionOverride``) run on the ranks
(Notes [torch assertEqual] and [device-type tests on simulated ranks] in
simpg/torch_testcase.py).

>>> import io, unittest, torch, torch.distributed as dist
>>> from simpg.testing import DTensorTestBase, with_comms
>>> class AllReduceTest(DTensorTestBase):
...     world_size = 2
...     @with_comms
...     def test_sum(self):
...         t = torch.tensor([self.rank + 1.0])
...         dist.all_reduce(t)
...         self.assertEqual(t, [3.0])
>>> suite = unittest.defaultTestLoader.loadTestsFromTestCase(AllReduceTest)
>>> unittest.TextTestRunner(stream=io.StringIO()).run(suite).wasSuccessful()
True
"""

from __future__ import annotations

import copy
import functools
import importlib
import sys
import unittest
import warnings
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, ClassVar, TypeVar

import torch
import torch.distributed as dist

from simpg.class_world import ClassWorld
from simpg.dtensor_lib import choose_library
from simpg.errors import RankFailedError
from simpg.runner import run
from simpg.subtests import run_subtests
from simpg.torch_testcase import base_on_torch_test_case, thread_local_state
from simpg.world import rank_context

__all__ = [
    "DEVICE_TYPE",
    "NUM_DEVICES",
    "DTensorOpTestBase",
    "DTensorTestBase",
    "skip_if_lt_x_gpu",
    "skip_unless_torch_gpu",
    "with_comms",
]

# torch's defaults on a machine without accelerators: 4 ranks on cpu
NUM_DEVICES = 4
DEVICE_TYPE = "cpu"
SEED = 1234  # torch's common_utils.SEED: every rank starts its test from this seed

F = TypeVar("F", bound=Callable[..., Any])
_defining_bases = True  # until this module's classes are defined (Note [torch assertEqual])


# -- torch's DTensor in reused threads -----------------------------------------------------------

def _fresh_torch_caches() -> None:
    """Forget what torch's DTensor cached for whichever rank this thread served before.

    torch keys its sharding and redistribute caches by mesh, and a mesh by thread id, not by
    rank (some entries depend on the rank's mesh coordinate); simpg reuses threads across
    worlds, so a thread may serve another rank next time. Only modules already imported are
    touched: simpg never imports torch's DTensor.
    """
    mods = sys.modules
    if "torch.distributed.tensor" not in mods:
        return
    torch._C._clear_DTensor_sharding_propagator_cache()  # this thread's C++ fast path
    api = mods.get("torch.distributed.tensor._api")
    if api is not None:
        api.DTensor._op_dispatcher.sharding_propagator.propagate_op_sharding.cache_clear()
    redistribute = mods.get("torch.distributed.tensor._redistribute")
    if redistribute is not None:
        redistribute._gen_transform_infos.cache_clear()
        redistribute.clear_redistribute_planner_cache()
    prop = mods.get("torch.distributed.tensor._sharding_prop")
    if prop is not None:
        prop.ShardingPropagator._propagate_tensor_meta_cached.cache_clear()


def _reset_torch_rng_tracker() -> None:
    # one module-level tracker, made by the first rank that drew random numbers: not per rank
    random_mod = sys.modules.get("torch.distributed.tensor._random")
    if random_mod is not None:
        random_mod._rng_tracker = None


# -- the test base ---------------------------------------------------------------------------------

def _unwrap_dtensors(x: Any, y: Any) -> tuple[Any, Any]:
    """torch's assertEqual rule for DTensors, for ours too: same placements and mesh, then the
    local tensors compare; a DTensor against a plain tensor is ambiguous."""
    x_dt, y_dt = (isinstance(v, torch.Tensor) and hasattr(v, "placements")
                  and hasattr(v, "to_local") for v in (x, y))
    if x_dt and y_dt:
        if tuple(x.placements) != tuple(y.placements):
            raise AssertionError(f"DTensor placements do not match: {x.placements} != "
                                 f"{y.placements}")
        if x.device_mesh != y.device_mesh:
            raise AssertionError(f"DTensor meshes do not match: {x.device_mesh} != "
                                 f"{y.device_mesh}")
        return x.to_local(), y.to_local()
    if x_dt != y_dt:
        raise TypeError("comparing a DTensor to a non-DTensor is ambiguous; compare "
                        ".full_tensor() (the whole tensor) or .to_local() (this rank's piece)")
    return x, y


# torch's TestCase once a test class derives from it: Note [torch assertEqual] in
# simpg/torch_testcase.py
class DTensorTestBase(unittest.TestCase):
    """torch's ``DTensorTestBase`` on simpg: each test method runs on every simulated rank.

    Each rank runs the method on its own shallow copy of the test instance (as each process
    has its own instance under torch's base), with the default process group initialised and
    torch's RNG seeded with ``SEED``; ``setUp`` and ``tearDown`` run once, on the calling
    thread, where ``self.rank`` is ``MAIN_PROCESS_RANK``. A failure is re-raised with the rank
    that raised it; a deadlock or mismatched collective raises simpg's error instead of hanging.
    Class attributes: ``world_size`` (4), ``dtensor_lib`` (where ``build_device_mesh`` finds
    ``init_device_mesh``: ``"dtensor"``, ours, or ``"torch.distributed.tensor"``; unset, the
    library the test module imports, Note [choosing the DTensor library]), ``timeout``
    (seconds a rank may run without yielding), ``class_world`` (``True``: the methods of the
    class share one world, rebuilt after a failing method: Note [a world kept between test
    methods] in simpg/class_world.py).

    >>> import unittest, torch
    >>> from dtensor import Shard, distribute_tensor
    >>> class ShardTest(DTensorTestBase):
    ...     world_size = 2
    ...     def test_rows(self):
    ...         d = distribute_tensor(torch.arange(6.0), self.build_device_mesh(), [Shard(0)])
    ...         self.assertEqual(d.to_local(), torch.arange(6.0)[3 * self.rank:][:3])
    >>> ShardTest("test_rows").run().wasSuccessful()
    True
    """

    MAIN_PROCESS_RANK: ClassVar[int] = -1
    dtensor_lib: ClassVar[str | None] = None  # None: the one the test module imports
    timeout: ClassVar[float] = 30.0
    class_world: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not _defining_bases:
            base_on_torch_test_case(DTensorTestBase)

    def __init__(self, method_name: str = "runTest", methodName: str = "runTest") -> None:
        if methodName != "runTest":  # torch's order of names, and unittest's keyword
            method_name = methodName
        test = getattr(type(self), method_name, None)
        if callable(test):
            # before torch's __init__, which wraps it (on this thread) in its failure policies
            setattr(self, method_name, self._on_ranks(test))
        super().__init__(method_name)

    # -- what torch's base offers -----------------------------------------------------------
    @property
    def world_size(self) -> int:
        return NUM_DEVICES

    @property
    def device_type(self) -> str:
        return DEVICE_TYPE

    @property
    def backend(self) -> str:
        return "simpg"

    @property
    def is_local_tensor_enabled(self) -> bool:
        return False

    @property
    def rank(self) -> int:
        """The calling rank; ``MAIN_PROCESS_RANK`` (-1) outside the test method's ranks."""
        ctx = rank_context.get()
        return self.MAIN_PROCESS_RANK if ctx is None else ctx[1]

    def build_device_mesh(self) -> Any:
        """A 1-d mesh of all ranks, from the ``init_device_mesh`` of the test's DTensor library
        (``dtensor_lib``, or the one its module imports: Note [choosing the DTensor library])."""
        lib = importlib.import_module(self._dtensor_library())
        return lib.init_device_mesh(self.device_type, (self.world_size,))

    def _dtensor_library(self) -> str:
        if self.dtensor_lib is not None:
            return self.dtensor_lib
        choice = choose_library(getattr(type(self), self._testMethodName, None), type(self))
        if choice.lib is None:
            raise choice.error(self.id())
        return choice.lib

    def init_manual_seed_for_rank(self) -> None:
        torch.manual_seed(self.rank)

    def init_pg(self, eager_init: bool = False, backend: str | None = None) -> None:
        """simpg initialised the default group already; any ``backend`` is simulated."""
        if not dist.is_initialized():
            raise RuntimeError(
                f"init_pg must run inside a test method on the simulated ranks (where simpg has "
                f"initialised the default group); it was called on rank {self.rank} with no group")

    def destroy_pg(self, device_id: int | None = None) -> None:
        """Meet the other ranks; simpg destroys the group when the method returns."""
        dist.barrier()

    def run_subtests(self, subtest_config: Mapping[str, Sequence[Any]], test_fn: Callable[..., Any],
                     *test_args: Any, **test_kwargs: Any) -> None:
        """Call ``test_fn(*test_args, **test_kwargs, **combo)`` for every combination.

        ``simpg.run_subtests`` with the test's id as the title: a failure aborts only its
        combination (the other ranks are released, the next combination starts clean); at
        the end every failing combination is reported once, with its values, its ranks, the
        user's line and a command that reruns just it.

        >>> import torch, torch.distributed as dist
        >>> class GridTest(DTensorTestBase):
        ...     world_size = 2
        ...     def test_grid(self):
        ...         def check(n):
        ...             t = torch.ones(n); dist.all_reduce(t); self.assertEqual(t.sum(), 2 * n)
        ...         self.run_subtests({"n": [1, 3]}, check)
        >>> GridTest("test_grid").run().wasSuccessful()
        True
        """
        __tracebackhide__ = True
        if rank_context.get() is None:
            raise RuntimeError("run_subtests must be called inside a test method, on the "
                               "simulated ranks; it was called outside them")
        # every rank raises the same merged report (Note [one report for the whole world])
        run_subtests(subtest_config, test_fn, *test_args, _title=self.id(), **test_kwargs)

    def subTest(self, *args: Any, **params: Any) -> Any:
        """unittest's ``subTest`` on the calling thread; on a rank, a failure inside it is
        re-raised with the rank and the parameters (a rank cannot go on alone)."""
        if rank_context.get() is None:
            return super().subTest(*args, **params)
        return _RankSubtest(self.rank, args, params)

    def assertEqual(self, x: Any, y: Any, msg: Any = None, **kwargs: Any) -> None:
        """torch's ``TestCase.assertEqual`` (tensors, numbers, containers, ``atol``/``rtol``,
        ``exact_dtype``…), from any rank; DTensors compare as in torch (same placements and
        mesh, then local pieces)."""
        __tracebackhide__ = True
        x, y = _unwrap_dtensors(x, y)
        super().assertEqual(x, y, msg, **kwargs)

    def assertNotEqual(self, x: Any, y: Any, msg: Any = None, **kwargs: Any) -> None:
        __tracebackhide__ = True
        x, y = _unwrap_dtensors(x, y)
        super().assertNotEqual(x, y, msg, **kwargs)

    def assertEqualOnRank(self, x: Any, y: Any, msg: Any = None, *, rank: int = 0) -> None:
        """torch's multithreaded base: ``assertEqual`` on ``rank`` only (the other ranks pass),
        the verdict torch gives; here every rank has its own RNG, so any rank could check."""
        if self.rank == rank:
            self.assertEqual(x, y, msg)

    def assertNotEqualOnRank(self, x: Any, y: Any, msg: Any = None, *, rank: int = 0) -> None:
        if self.rank == rank:
            self.assertNotEqual(x, y, msg)

    def _test_op_on_dtensor(self, op_call: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        """``op_call`` on DTensors, gathered, equals ``op_call`` on their full tensors."""
        from torch.utils._pytree import tree_flatten, tree_map

        def full(a: Any) -> Any:
            return a.full_tensor() if hasattr(a, "full_tensor") else a

        expected, _ = tree_flatten(op_call(*tree_map(full, args), **tree_map(full, kwargs)))
        actual, _ = tree_flatten(op_call(*args, **kwargs))
        self.assertEqual(expected, [full(a) for a in actual])

    # -- running a method on the ranks ------------------------------------------------------
    @classmethod
    def tearDownClass(cls) -> None:
        kept = _kept_worlds.pop(cls, None)
        if kept is not None:
            kept.close()
        super().tearDownClass()

    def run(self, result: unittest.TestResult | None = None) -> unittest.TestResult:
        """torch's ``run`` (Note [torch assertEqual]), returning the result as unittest's does."""
        own = result is None
        if result is None:
            result = self.defaultTestResult()
            result.startTestRun()
        try:
            super().run(result)
        finally:
            if own:
                result.stopTestRun()
        return result

    def _on_ranks(self, test: Callable[..., Any]) -> Callable[[], None]:
        @functools.wraps(test)  # keeps unittest's skip / expectedFailure marks
        def on_ranks() -> None:
            self._run_on_ranks(test)

        return on_ranks

    def _run_on_ranks(self, test: Callable[..., Any]) -> None:
        if rank_context.get() is not None:
            raise RuntimeError(f"{self.id()} was called on a simulated rank; a test method runs "
                               "its own world and must be called from outside one")
        hand_over = thread_local_state(self)
        if self.dtensor_lib is None:  # this test's choice, readable as self.dtensor_lib
            self.dtensor_lib = choose_library(test, type(self)).lib  # type: ignore[misc]

        def rank_body() -> None:
            _fresh_torch_caches()
            torch.manual_seed(SEED)
            mine = copy.copy(self)
            hand_over(mine)
            try:
                test(mine)
            finally:
                _fresh_torch_caches()

        try:
            # warnings.catch_warnings inside the ranks (torch's @suppress_warnings) interleave
            # at collectives and restore each other's filters: the caller gets its own back
            with warnings.catch_warnings():
                if self.class_world:
                    _kept_world(self).run_on_ranks(rank_body)
                else:
                    run(rank_body, self.world_size, timeout=self.timeout)
        finally:
            _reset_torch_rng_tracker()


_kept_worlds: dict[type, ClassWorld] = {}  # class_world: the class's world, until tearDownClass


def _kept_world(test: DTensorTestBase) -> ClassWorld:
    """The world ``test``'s class keeps (a new one after a failure or for another size)."""
    kept = _kept_worlds.get(type(test))
    if kept is None or kept.ended or kept.size != test.world_size:
        if kept is not None:
            kept.close()
        kept = _kept_worlds[type(test)] = ClassWorld(test.world_size, test.timeout)
    return kept


class DTensorOpTestBase(DTensorTestBase):
    """torch's ``DTensorOpTestBase``: the same base, meant for methods without ``with_comms``
    (the default group exists either way)."""


class _RankSubtest:
    """``subTest`` on a rank: no result to report into, so failures propagate with a note."""

    def __init__(self, rank: int, args: tuple, params: dict[str, Any]) -> None:
        self.label = ", ".join([repr(a) for a in args] + [f"{k}={v!r}" for k, v in params.items()])
        self.rank = rank

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> bool:
        if isinstance(error, Exception) and not isinstance(error, RankFailedError):
            error.add_note(f"[simpg.testing] in subTest({self.label}) on rank {self.rank}")
        return False


# -- decorators ------------------------------------------------------------------------------------

def with_comms(eager_init: Any = False, backend: str | None = None) -> Any:
    """torch's ``@with_comms``, ``@with_comms()`` or ``@with_comms(eager_init=..., backend=...)``:
    ``init_pg`` (the simulated group is already there), the method, then ``destroy_pg`` (a
    barrier: a rank still issuing collectives shows up as a mismatch).

    >>> import torch.distributed as dist
    >>> class T(DTensorTestBase):
    ...     world_size = 2
    ...     @with_comms
    ...     def test_ranks(self):
    ...         self.assertEqual(dist.get_world_size(), 2)
    >>> T("test_ranks").run().wasSuccessful()
    True
    """

    def decorator(func: F, eager_init: bool = False, backend: str | None = None) -> F:
        @functools.wraps(func)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> None:
            if not hasattr(self, "init_pg"):  # a harness without it, as in torch's decorator
                func(self, *args, **kwargs)
                return
            self.init_pg(eager_init, backend)
            func(self, *args, **kwargs)
            self.destroy_pg()

        return wrapper  # type: ignore[return-value]

    if callable(eager_init):
        return decorator(eager_init)
    return functools.partial(decorator, eager_init=eager_init, backend=backend)


def _accelerators() -> int:
    return torch.accelerator.device_count() if torch.accelerator.is_available() else 0


def skip_if_lt_x_gpu(x: int, *, allow_cpu: bool = False) -> Callable[[F], F]:
    """torch's decorator: simulated ranks need no GPU, so a test whose ``device_type`` is
    ``"cpu"`` runs; on another device type it is skipped unless ``x`` accelerators exist.
    ``allow_cpu`` is accepted for torch's signature (cpu always runs here).

    >>> class T(DTensorTestBase):
    ...     world_size = 2
    ...     @skip_if_lt_x_gpu(8)
    ...     def test_runs_on_cpu(self):
    ...         self.assertEqual(self.device_type, "cpu")
    >>> T("test_runs_on_cpu").run().wasSuccessful()
    True
    """

    def decorator(func: F) -> F:
        @functools.wraps(func)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            device = getattr(self, "device_type", DEVICE_TYPE)
            if device != "cpu" and _accelerators() < x:
                raise unittest.SkipTest(f"needs {x} {device} devices, found {_accelerators()}")
            return func(self, *args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorator


def skip_unless_torch_gpu(method: F) -> F:
    """torch's ``skip_unless_torch_gpu``: ``skip_if_lt_x_gpu(NUM_DEVICES)``."""
    return skip_if_lt_x_gpu(NUM_DEVICES)(method)


_defining_bases = False  # test classes derived from here on are put on torch's TestCase
