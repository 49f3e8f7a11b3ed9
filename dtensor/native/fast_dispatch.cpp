// The dispatcher's cached case in compiled code: Note [native fast path] in
// dtensor/native/__init__.py. Key, lookup, local call and rewrap mirror
// dtensor.dispatch.torch_dispatch exactly; whatever this file does not handle is
// handed, untouched, to that Python function (the `fallback`).
#include <Python.h>
#include <structmember.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/Allocator.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/Storage.h>
#include <c10/core/TensorImpl.h>
#include <ATen/EmptyTensor.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/python/pybind_utils.h>

#include <optional>
#include <vector>

namespace {

// set once by bind()
PyObject* g_cls = nullptr;          // dtensor.DTensor
PyObject* g_fallback = nullptr;     // dtensor.dispatch.torch_dispatch
PyObject* g_scalar_types = nullptr; // dispatch._SCALARS (a frozenset of types)
PyObject* g_records = nullptr;      // debug._records (ContextVar)
PyObject* g_check_plain = nullptr;  // dispatch._check_plain (ContextVar)
PyObject* g_env = nullptr;          // os.environ._data, or None
PyObject* g_debug_key = nullptr;    // b"DTENSOR_DEBUG"
PyObject* g_debug_env = nullptr;    // debug._debug_env
PyObject* g_reraise = nullptr;      // native._raise_in_dispatch
Py_ssize_t g_off_local = -1, g_off_spec = -1, g_off_tspec = -1;  // DTensor's slots
PyTypeObject* g_tspec_type = nullptr;  // TensorSpec: its _hash field
PyTypeObject* g_dspec_type = nullptr;  // DTensorSpec: its mesh field
PyTypeObject* g_entry_type = nullptr;  // dispatch._FastPlan: its native field
Py_ssize_t g_off_hash = -1, g_off_mesh = -1, g_off_native = -1;
unsigned long long g_taken = 0;  // calls this entry ran itself (tests read it)

PyObject* s_op;
PyObject* s_pinned;
PyObject* s_mesh;
PyObject* s_dict;
PyObject* s_fast_plans;
PyObject* s_native;
PyObject* s_shape;
PyObject* s_stride;
PyObject* s_dtype;
PyObject* s_device;

const char* kCapsule = "dtensor.native.Plan";

inline PyObject* slot(PyObject* obj, Py_ssize_t off) {
  return *reinterpret_cast<PyObject**>(reinterpret_cast<char*>(obj) + off);
}

inline void set_slot(PyObject* obj, Py_ssize_t off, PyObject* value) {  // steals value
  PyObject** p = reinterpret_cast<PyObject**>(reinterpret_cast<char*>(obj) + off);
  Py_XSETREF(*p, value);
}

// One output of a plan: the wrapper's spec fields, read once at record time.
struct Out {
  PyObject* spec;
  PyObject* tspec;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  c10::ScalarType dtype;
  c10::Layout layout;
};

// An argument whose value the key fixes (a scalar, an int list, a rewritten size): its
// IValue is converted once. A float or complex one is equal as a key but maybe not as a
// value (0.0 == -0.0): it is converted again unless it is the very object recorded.
struct Fixed {
  size_t index;            // in the stack
  PyObject* recorded;      // the object seen at record time (owned)
  c10::IValue value;
  c10::TypePtr type;
  bool check_identity;
  Py_ssize_t position;     // positional index, or -1 for a keyword
  PyObject* name;          // keyword name (owned), or nullptr
};

// What each positional argument is: its local piece (moved when the entry says so), a list
// of local pieces, a plain tensor, or a value the key fixes (Fixed).
enum class Kind { DTensor, DTensorList, Plain, Fixed };

struct TensorArg {
  size_t index;
  Kind kind;
  PyObject* move;  // Note [local moves]: the piece's move, or nullptr (the plan owns it)
};

struct Plan {
  c10::OperatorHandle op;
  bool allow_numbers;
  Py_ssize_t nargs;
  std::vector<TensorArg> tensors;
  std::vector<Fixed> fixed;
  std::vector<c10::IValue> stack;  // the template: fixed values and defaults in place
  std::vector<Out> outs;
  int container;  // 0: one tensor, 1: tuple, 2: list
  bool list_return;  // one Tensor[] return
  Py_ssize_t returns_arg;
  // Note [local functions]: the strategy's function runs instead of the op, on a Python
  // tuple of arguments (with the rewritten sizes in place)
  PyObject* func = nullptr;
  PyObject* local = nullptr;
  PyObject* boxes = nullptr;
  std::vector<Kind> kinds;            // per positional argument
  std::vector<PyObject*> rewritten;   // per positional argument, or nullptr
  std::vector<PyObject*> owned;       // moves, rewritten values, func, local, boxes

  explicit Plan(c10::OperatorHandle h) : op(std::move(h)) {}
  PyObject* keep(PyObject* o) {  // a new reference the plan holds; o itself
    Py_XINCREF(o);
    owned.push_back(o);
    return o;
  }
  ~Plan() {
    for (auto& f : fixed) {
      Py_XDECREF(f.recorded);
      Py_XDECREF(f.name);
    }
    for (PyObject* o : owned) Py_XDECREF(o);
    for (auto& o : outs) {
      Py_XDECREF(o.spec);
      Py_XDECREF(o.tspec);
    }
  }
};

void free_plan(PyObject* capsule) {
  delete static_cast<Plan*>(PyCapsule_GetPointer(capsule, kCapsule));
}

// The GIL released for the scope, taken back on the way out (an exception included).
struct WithoutGil {
  PyThreadState* state = PyEval_SaveThread();
  ~WithoutGil() { PyEval_RestoreThread(state); }
};

PyObject* call_fallback(PyObject* const* args, Py_ssize_t nargs) {
  return PyObject_Vectorcall(g_fallback, args, nargs, nullptr);
}

bool is_scalar_type(PyObject* t) {
  int r = PySet_Contains(g_scalar_types, t);
  if (r < 0) {
    PyErr_Clear();
    return false;
  }
  return r == 1;
}

// debug.recording(), _check_plain.get() or inference mode (a view's wrapper must then be
// built as the Python entry does: Note [inference mode] in dtensor.dispatch): -1 on error
int off_fast_path() {
  if (c10::InferenceMode::is_enabled()) return 1;
  PyObject* v = nullptr;
  if (PyContextVar_Get(g_records, nullptr, &v) < 0) return -1;
  bool recording = v != nullptr && v != Py_None;
  Py_XDECREF(v);
  if (recording) return 1;
  if (g_env == Py_None) {
    PyObject* r = PyObject_CallNoArgs(g_debug_env);
    if (!r) return -1;
    int t = PyObject_IsTrue(r);
    Py_DECREF(r);
    if (t != 0) return t;
  } else {
    int has = PyDict_Contains(g_env, g_debug_key);
    if (has < 0) return -1;
    if (has) {
      PyObject* r = PyObject_CallNoArgs(g_debug_env);
      if (!r) return -1;
      int t = PyObject_IsTrue(r);
      Py_DECREF(r);
      if (t != 0) return t;
    }
  }
  v = nullptr;
  if (PyContextVar_Get(g_check_plain, nullptr, &v) < 0) return -1;
  int t = v ? PyObject_IsTrue(v) : 0;
  Py_XDECREF(v);
  return t;
}

// The DTensor's mesh if it may join a key (not pinned, on `mesh` when one is known), else
// nullptr (borrowed); *error when Python raised.
PyObject* mesh_of(PyObject* d, PyObject* mesh, bool* error) {
  PyObject* pinned = PyObject_GetAttr(d, s_pinned);
  if (!pinned) {
    *error = true;
    return nullptr;
  }
  int p = PyObject_IsTrue(pinned);
  Py_DECREF(pinned);
  if (p != 0) {
    *error = p < 0;
    return nullptr;
  }
  PyObject* spec = slot(d, g_off_spec);
  if (!spec || Py_TYPE(spec) != g_dspec_type) return nullptr;
  PyObject* m = slot(spec, g_off_mesh);
  if (!m || (mesh != nullptr && m != mesh)) return nullptr;
  return m;
}

// Python's tuple hash (Objects/tupleobject.c, xxHash's mixing), item by item, so that a key
// holding TensorSpecs is hashed without calling their Python __hash__: a spec's hash is its
// _hash field, as TensorSpec.__hash__ returns it (slot_tp_hash's rule: -1 becomes -2). A
// result that differed from hash(key) could only miss, and a miss goes to the Python entry.
constexpr Py_uhash_t kPrime1 = 11400714785074694791ULL;
constexpr Py_uhash_t kPrime2 = 14029467366897019727ULL;
constexpr Py_uhash_t kPrime5 = 2870177450012600261ULL;

Py_hash_t item_hash(PyObject* item);

Py_hash_t tuple_hash(PyObject* const* items, Py_ssize_t len) {
  Py_uhash_t acc = kPrime5;
  for (Py_ssize_t i = 0; i < len; ++i) {
    Py_uhash_t lane = static_cast<Py_uhash_t>(item_hash(items[i]));
    if (lane == static_cast<Py_uhash_t>(-1)) return -1;
    acc += lane * kPrime2;
    acc = (acc << 31) | (acc >> 33);
    acc *= kPrime1;
  }
  acc += static_cast<Py_uhash_t>(len) ^ (kPrime5 ^ 3527539UL);
  if (acc == static_cast<Py_uhash_t>(-1)) return 1546275796;
  return static_cast<Py_hash_t>(acc);
}

Py_hash_t item_hash(PyObject* item) {
  if (Py_TYPE(item) == g_tspec_type) {
    PyObject* h = slot(item, g_off_hash);
    if (h && PyLong_CheckExact(h)) {
      Py_hash_t v = PyLong_AsSsize_t(h);
      if (v == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return PyObject_Hash(item);
      }
      return v == -1 ? -2 : v;
    }
  } else if (PyTuple_CheckExact(item)) {
    return tuple_hash(&PyTuple_GET_ITEM(item, 0), PyTuple_GET_SIZE(item));
  }
  return PyObject_Hash(item);
}

// The key's items, owned, before they become a tuple.
struct KeyItems {
  c10::SmallVector<PyObject*, 12> items;
  ~KeyItems() {
    for (PyObject* o : items) Py_XDECREF(o);
  }
  void add(PyObject* borrowed) {
    Py_INCREF(borrowed);
    items.push_back(borrowed);
  }
  void take(PyObject* owned) { items.push_back(owned); }
  PyObject* tuple() {
    PyObject* t = PyTuple_New(static_cast<Py_ssize_t>(items.size()));
    if (!t) return nullptr;
    for (size_t i = 0; i < items.size(); ++i) PyTuple_SET_ITEM(t, i, items[i]);
    items.clear();
    return t;
  }
};

// The item a list or tuple argument adds to the key (new reference): its specs when it holds
// DTensors, itself as a tuple when it holds ints; nullptr when neither (*error if raised).
PyObject* sequence_item(PyObject* a, PyObject** mesh, bool* error) {
  Py_ssize_t len = PySequence_Fast_GET_SIZE(a);
  PyObject** items = PySequence_Fast_ITEMS(a);
  PyObject* part = PyTuple_New(len);
  if (!part) {
    *error = true;
    return nullptr;
  }
  bool dtensors = len > 0 && reinterpret_cast<PyObject*>(Py_TYPE(items[0])) == g_cls;
  for (Py_ssize_t j = 0; j < len; ++j) {
    PyObject* v = items[j];
    PyObject* item = v;
    if (dtensors) {
      PyObject* m = reinterpret_cast<PyObject*>(Py_TYPE(v)) == g_cls
          ? mesh_of(v, *mesh, error) : nullptr;
      if (!m) {
        Py_DECREF(part);
        return nullptr;
      }
      *mesh = m;
      item = slot(v, g_off_tspec);
    } else if (!PyLong_CheckExact(v)) {
      Py_DECREF(part);
      return nullptr;
    }
    Py_INCREF(item);
    PyTuple_SET_ITEM(part, j, item);
  }
  return part;
}

// (shape, stride(), dtype, device) of a plain tensor argument (new reference)
PyObject* plain_item(PyObject* a) {
  PyObject* shape = PyObject_GetAttr(a, s_shape);
  PyObject* stride = shape ? PyObject_CallMethodNoArgs(a, s_stride) : nullptr;
  PyObject* dtype = stride ? PyObject_GetAttr(a, s_dtype) : nullptr;
  PyObject* device = dtype ? PyObject_GetAttr(a, s_device) : nullptr;
  PyObject* part = device ? PyTuple_Pack(4, shape, stride, dtype, device) : nullptr;
  Py_XDECREF(shape);
  Py_XDECREF(stride);
  Py_XDECREF(dtype);
  Py_XDECREF(device);
  return part;
}

// The fast-table key of dtensor.dispatch.torch_dispatch and its hash, or nullptr with
// *go_python set (the call is not keyed: the Python entry decides) or an error set.
PyObject* build_key(PyObject* func, PyObject* args, PyObject* kwargs, PyObject** mesh_out,
                    Py_hash_t* hash, bool* go_python) {
  KeyItems key;
  PyObject* op = PyObject_GetAttr(func, s_op);
  if (!op) return nullptr;
  key.take(op);
  PyObject* mesh = nullptr;
  bool error = false;
  auto fail = [&]() -> PyObject* {
    *go_python = !error && !PyErr_Occurred();
    return nullptr;
  };
  Py_ssize_t n = PyTuple_GET_SIZE(args);
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* a = PyTuple_GET_ITEM(args, i);
    PyObject* kind = reinterpret_cast<PyObject*>(Py_TYPE(a));
    if (kind == g_cls) {
      PyObject* m = mesh_of(a, mesh, &error);
      if (!m) return fail();
      mesh = m;
      key.add(slot(a, g_off_tspec));
    } else if (is_scalar_type(kind)) {  // 2 == 2.0 == True as keys, not as arguments
      key.add(a);
      key.add(kind);
    } else if (PyList_CheckExact(a) || PyTuple_CheckExact(a)) {
      PyObject* part = sequence_item(a, &mesh, &error);
      if (!part) return fail();
      key.take(part);
    } else if (kind == THPVariableClass) {  // a plain tensor, taken as Replicate
      PyObject* part = plain_item(a);
      if (!part) return nullptr;
      key.take(part);
    } else {
      return fail();
    }
  }
  if (mesh == nullptr) return fail();
  if (kwargs != Py_None && PyDict_GET_SIZE(kwargs) > 0) {
    Py_ssize_t pos = 0;
    PyObject *name, *value;
    while (PyDict_Next(kwargs, &pos, &name, &value)) {
      PyObject* kind = reinterpret_cast<PyObject*>(Py_TYPE(value));
      if (!is_scalar_type(kind)) return fail();
      key.add(name);
      key.add(value);
      key.add(kind);
    }
  }
  *hash = tuple_hash(key.items.data(), static_cast<Py_ssize_t>(key.items.size()));
  if (*hash == -1) return nullptr;
  *mesh_out = mesh;
  return key.tuple();
}

// A new wrapper of `cls` around `local`, as Tensor._make_wrapper_subclass builds it (a
// storage of no data, sizes and strides of the global tensor, no autograd).
PyObject* wrap(PyObject* cls, const at::Tensor& local, const Out& out) {
  auto device = local.device();
  auto options = c10::TensorOptions().dtype(out.dtype).device(device).layout(out.layout);
  int64_t itemsize = static_cast<int64_t>(options.dtype().itemsize());
  auto nbytes = at::detail::computeStorageNbytes(out.sizes, out.strides, itemsize, 0);
  c10::Storage storage{c10::Storage::use_byte_size_t{}, static_cast<size_t>(nbytes),
                       c10::DataPtr{nullptr, device}, c10::GetAllocator(c10::kMeta),
                       /*resizable=*/true};
  auto keys = c10::DispatchKeySet({options.computeDispatchKey()});
  at::Tensor tensor =
      at::detail::make_tensor<c10::TensorImpl>(std::move(storage), keys, options.dtype());
  tensor.unsafeGetTensorImpl()->set_sizes_and_strides(out.sizes, out.strides);
  // what THPVariable_NewWithVar adds for a class with __torch_dispatch__ (Wrap does not)
  tensor.unsafeGetTensorImpl()->set_python_dispatch(true);
  PyObject* obj = THPVariable_Wrap(tensor, reinterpret_cast<PyTypeObject*>(cls));
  if (!obj) return nullptr;
  PyObject* local_obj = THPVariable_Wrap(local);
  if (!local_obj) {
    Py_DECREF(obj);
    return nullptr;
  }
  set_slot(obj, g_off_local, local_obj);
  Py_INCREF(out.spec);
  set_slot(obj, g_off_spec, out.spec);
  Py_INCREF(out.tspec);
  set_slot(obj, g_off_tspec, out.tspec);
  return obj;
}

PyObject* wrap_all(const Plan& plan, PyObject* cls, const std::vector<at::Tensor>& results);

// Note [local functions] in dtensor.ops: entry.local(func, largs, kwargs, boxes), on the
// arguments the Python entry would build (pieces, lists of pieces, moves, rewritten sizes).
PyObject* run_local(const Plan& plan, PyObject* cls, PyObject* args, PyObject* kwargs,
                    bool* go_python) {
  Py_ssize_t n = plan.nargs;
  PyObject* largs = PyTuple_New(n);
  if (!largs) return nullptr;
  auto give_up = [&](bool python) -> PyObject* {
    Py_DECREF(largs);
    *go_python = python;
    return nullptr;
  };
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* a = PyTuple_GET_ITEM(args, i);
    PyObject* v = nullptr;
    if (plan.kinds[i] == Kind::DTensor) {
      v = slot(a, g_off_local);
      if (!v) return give_up(true);
      Py_INCREF(v);
    } else if (plan.kinds[i] == Kind::DTensorList) {
      Py_ssize_t len = PySequence_Fast_GET_SIZE(a);
      v = PyList_New(len);
      if (!v) return give_up(false);
      for (Py_ssize_t j = 0; j < len; ++j) {
        PyObject* piece = slot(PySequence_Fast_ITEMS(a)[j], g_off_local);
        if (!piece) {
          Py_DECREF(v);
          return give_up(true);
        }
        Py_INCREF(piece);
        PyList_SET_ITEM(v, j, piece);
      }
    } else {
      v = plan.rewritten[i] ? plan.rewritten[i] : a;
      Py_INCREF(v);
    }
    PyTuple_SET_ITEM(largs, i, v);
  }
  for (const auto& t : plan.tensors) {
    if (t.move == nullptr) continue;
    PyObject* moved = PyObject_CallOneArg(t.move, PyTuple_GET_ITEM(largs, t.index));
    if (!moved) return give_up(false);
    Py_SETREF(PyTuple_GET_ITEM(largs, t.index), moved);
  }
  bool no_kwargs = kwargs == Py_None || PyDict_GET_SIZE(kwargs) == 0;
  PyObject* kw = no_kwargs ? PyDict_New() : kwargs;
  if (!kw) return give_up(false);
  if (!no_kwargs) Py_INCREF(kw);
  PyObject* call[] = {plan.func, largs, kw, plan.boxes};
  PyObject* out = PyObject_Vectorcall(plan.local, call, 4, nullptr);
  Py_DECREF(kw);
  Py_DECREF(largs);
  if (!out) return nullptr;
  if (plan.returns_arg >= 0) {
    Py_DECREF(out);
    PyObject* r = PyTuple_GET_ITEM(args, plan.returns_arg);
    Py_INCREF(r);
    return r;
  }
  std::vector<at::Tensor> results;
  bool ok = true;
  if (plan.container == 0) {
    ok = THPVariable_Check(out);
    if (ok) results.push_back(THPVariable_Unpack(out));
  } else {
    PyObject* seq = PySequence_Fast(out, "a local function returned no sequence");
    if (!seq) {
      Py_DECREF(out);
      return nullptr;
    }
    for (Py_ssize_t j = 0; ok && j < PySequence_Fast_GET_SIZE(seq); ++j) {
      PyObject* item = PySequence_Fast_ITEMS(seq)[j];
      ok = THPVariable_Check(item);
      if (ok) results.push_back(THPVariable_Unpack(item));
    }
    Py_DECREF(seq);
  }
  Py_DECREF(out);
  if (!ok) {
    PyErr_SetString(PyExc_TypeError, "a local function returned something else than tensors");
    return nullptr;
  }
  if (plan.container == 0) return wrap(cls, results[0], plan.outs[0]);
  return wrap_all(plan, cls, results);
}

// Run a plan on this call's arguments: nullptr with *go_python when a local piece is not a
// plain tensor (a subclass may want its own handling: the Python entry decides).
PyObject* run(Plan& plan, PyObject* cls, PyObject* args, PyObject* kwargs, bool* go_python) {
  if (PyTuple_GET_SIZE(args) != plan.nargs) {
    *go_python = true;
    return nullptr;
  }
  if (plan.local != nullptr) return run_local(plan, cls, args, kwargs, go_python);
  torch::jit::Stack stack(plan.stack);
  int64_t numel = 0;
  for (const auto& t : plan.tensors) {
    PyObject* a = PyTuple_GET_ITEM(args, t.index);
    if (t.kind == Kind::DTensorList) {
      c10::List<at::Tensor> pieces;
      Py_ssize_t len = PySequence_Fast_GET_SIZE(a);
      pieces.reserve(len);
      for (Py_ssize_t j = 0; j < len; ++j) {
        PyObject* local = slot(PySequence_Fast_ITEMS(a)[j], g_off_local);
        if (local == nullptr || !THPVariable_CheckExact(local)) {
          *go_python = true;
          return nullptr;
        }
        pieces.push_back(THPVariable_Unpack(local));
        numel += pieces.get(j).numel();
      }
      stack[t.index] = std::move(pieces);
      continue;
    }
    PyObject* local = t.kind == Kind::DTensor ? slot(a, g_off_local) : a;
    if (local == nullptr || !THPVariable_CheckExact(local)) {
      *go_python = true;
      return nullptr;
    }
    if (t.move != nullptr) {
      PyObject* moved = PyObject_CallOneArg(t.move, local);
      if (!moved) return nullptr;
      if (!THPVariable_Check(moved)) {
        Py_DECREF(moved);
        PyErr_SetString(PyExc_TypeError, "a local move returned something else than a tensor");
        return nullptr;
      }
      stack[t.index] = THPVariable_Unpack(moved);
      Py_DECREF(moved);
    } else {
      stack[t.index] = THPVariable_Unpack(local);
    }
    numel += stack[t.index].toTensor().numel();
  }
  for (const auto& f : plan.fixed) {
    if (!f.check_identity) continue;
    PyObject* now = f.position >= 0 ? PyTuple_GET_ITEM(args, f.position)
                                    : PyDict_GetItemWithError(kwargs, f.name);
    if (now == nullptr) {
      *go_python = !PyErr_Occurred();
      return nullptr;
    }
    if (now != f.recorded) {
      torch::jit::ToIValueAllowNumbersAsTensors allow(plan.allow_numbers);
      stack[f.index] = torch::jit::toIValue(now, f.type);
    }
  }
  if (numel >= (1 << 15)) {  // as func._op does; a small op costs less than the hand-over
    WithoutGil no_gil;
    plan.op.callBoxed(stack);
  } else {
    plan.op.callBoxed(stack);
  }
  if (plan.returns_arg >= 0) {
    PyObject* r = PyTuple_GET_ITEM(args, plan.returns_arg);
    Py_INCREF(r);
    return r;
  }
  if (plan.container == 0) return wrap(cls, stack[0].toTensor(), plan.outs[0]);
  std::vector<at::Tensor> results;
  if (plan.list_return) {
    for (const auto& t : stack[0].toTensorList()) results.push_back(t);
  } else {
    for (auto& v : stack) results.push_back(v.toTensor());
  }
  return wrap_all(plan, cls, results);
}

// The plan's container of wrappers around `results`, zipped with its outputs as the Python
// entry zips them.
PyObject* wrap_all(const Plan& plan, PyObject* cls, const std::vector<at::Tensor>& results) {
  size_t n = std::min(results.size(), plan.outs.size());  // zip(out, entry.outs)
  PyObject* seq = plan.container == 2 ? PyList_New(n) : PyTuple_New(n);
  if (!seq) return nullptr;
  for (size_t i = 0; i < n; ++i) {
    PyObject* w = wrap(cls, results[i], plan.outs[i]);
    if (!w) {
      Py_DECREF(seq);
      return nullptr;
    }
    if (plan.container == 2)
      PyList_SET_ITEM(seq, i, w);
    else
      PyTuple_SET_ITEM(seq, i, w);
  }
  return seq;
}

// f(), with a C++ exception (the op's) turned into the Python error torch's bindings raise.
// Not HANDLE_TH_ERRORS: its warning handler would turn a kernel's TORCH_WARN into a Python
// warning where func._op, as the Python entry calls it, leaves it to the caller's handler.
template <typename F>
PyObject* translated(F f) {
  try {
    return f();
  } catch (...) {
    torch::translate_exception_to_python(std::current_exception());
    return nullptr;
  }
}

PyObject* run_translated(Plan& plan, PyObject* cls, PyObject* args, PyObject* kwargs,
                         bool* go_python) {
  return translated([&] { return run(plan, cls, args, kwargs, go_python); });
}

// The pending error raised again from a Python frame whose local `func` is the op, as the
// Python entry's frame has it (opdb_tests.causes names the op from it).
PyObject* reraise_in_dispatch(PyObject* func) {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  if (tb != nullptr && value != nullptr) PyException_SetTraceback(value, tb);
  Py_XDECREF(type);
  Py_XDECREF(tb);
  if (value == nullptr) return nullptr;
  PyObject* call[] = {func, value};
  PyObject* r = PyObject_Vectorcall(g_reraise, call, 2, nullptr);
  Py_DECREF(value);
  Py_XDECREF(r);  // it always raises
  return nullptr;
}

// dict[key] with the hash computed above (CPython 3.13 keeps the known-hash lookup private:
// there the key's TensorSpecs are hashed by their Python __hash__ again)
PyObject* lookup(PyObject* dict, PyObject* key, Py_hash_t hash) {
#if PY_VERSION_HEX < 0x030D0000
  return _PyDict_GetItem_KnownHash(dict, key, hash);
#else
  (void)hash;
  return PyDict_GetItemWithError(dict, key);
#endif
}

// The entry's work; dispatch() is this with C++ exceptions turned into Python errors.
PyObject* dispatch_entry(PyObject* const* argv, Py_ssize_t nargs) {
  if (nargs < 4 || nargs > 5) return call_fallback(argv, nargs);
  PyObject* cls = argv[0];
  PyObject* func = argv[1];
  PyObject* types = argv[2];
  PyObject* args = argv[3];
  PyObject* kwargs = nargs == 5 ? argv[4] : Py_None;
  if (cls != g_cls || !PyTuple_CheckExact(types) || PyTuple_GET_SIZE(types) > 1 ||
      !PyTuple_CheckExact(args) || (kwargs != Py_None && !PyDict_CheckExact(kwargs)))
    return call_fallback(argv, nargs);
  PyObject* mesh = nullptr;
  Py_hash_t hash = -1;
  bool go_python = false;
  PyObject* key = build_key(func, args, kwargs, &mesh, &hash, &go_python);
  if (!key) return go_python ? call_fallback(argv, nargs) : nullptr;
  PyObject* dict = PyObject_GetAttr(mesh, s_dict);
  if (!dict) {
    Py_DECREF(key);
    return nullptr;
  }
  PyObject* fast = PyDict_GetItemWithError(dict, s_fast_plans);
  PyObject* entry = fast && PyDict_CheckExact(fast) ? lookup(fast, key, hash) : nullptr;
  Py_DECREF(key);
  if (!entry || Py_TYPE(entry) != g_entry_type) {
    Py_DECREF(dict);
    return PyErr_Occurred() ? nullptr : call_fallback(argv, nargs);
  }
  PyObject* capsule = slot(entry, g_off_native);  // the table, held by dict, holds it
  Py_XINCREF(capsule);
  Py_DECREF(dict);
  int off = capsule == nullptr || capsule == Py_None ? 1 : off_fast_path();
  if (off != 0) {
    Py_XDECREF(capsule);
    return off < 0 ? nullptr : call_fallback(argv, nargs);
  }
  auto* plan = static_cast<Plan*>(PyCapsule_GetPointer(capsule, kCapsule));
  if (!plan) {
    Py_DECREF(capsule);
    return nullptr;
  }
  PyObject* out = run_translated(*plan, cls, args, kwargs, &go_python);
  Py_DECREF(capsule);
  if (!out && go_python) return call_fallback(argv, nargs);
  if (!out) return reraise_in_dispatch(func);
  ++g_taken;
  return out;
}

// __torch_dispatch__(cls, func, types, args, kwargs)
PyObject* dispatch(PyObject* /*module*/, PyObject* const* argv, Py_ssize_t nargs) {
  return translated([&] { return dispatch_entry(argv, nargs); });
}

// A Tensor, Tensor?, Tensor[] or Tensor?[] argument: a Python number there is refused
// unless the op allows numbers as tensors (toIValue's rule)
bool is_tensor_type(c10::TypePtr t) {
  if (auto opt = t->cast<c10::OptionalType>()) t = opt->getElementType();
  if (auto list = t->cast<c10::ListType>()) t = list->getElementType();
  if (auto opt = t->cast<c10::OptionalType>()) t = opt->getElementType();
  return t->kind() == c10::TypeKind::TensorType;
}

// The op's stack with every value the key fixes converted once (positional scalars, int lists,
// rewritten sizes, keyword arguments, defaults); false when an argument cannot be prepared
// (the entry stays with the Python entry).
bool prepare_stack(Plan& plan, const c10::FunctionSchema& schema, PyObject* args,
                   PyObject* kwargs) {
  const auto& sargs = schema.arguments();
  Py_ssize_t n = plan.nargs;
  plan.stack.resize(sargs.size());
  auto convert = [&](PyObject* value, const c10::Argument& sarg, c10::IValue* out) {
    try {
      *out = torch::jit::toIValue(value, sarg.real_type());
      return true;
    } catch (const std::exception&) {
      return false;
    }
  };
  for (Py_ssize_t i = 0; i < n; ++i) {
    const auto& sarg = sargs[i];
    if (sarg.kwarg_only()) return false;
    if (plan.kinds[i] != Kind::Fixed) continue;
    PyObject* a = PyTuple_GET_ITEM(args, i);
    PyObject* value = plan.rewritten[i] ? plan.rewritten[i] : a;
    bool sequence = PyList_CheckExact(value) || PyTuple_CheckExact(value);
    if (!plan.rewritten[i] && !sequence &&
        !is_scalar_type(reinterpret_cast<PyObject*>(Py_TYPE(a))))
      return false;
    if (sequence) {  // ints only: the key took no other list here
      for (Py_ssize_t j = 0; j < PySequence_Fast_GET_SIZE(value); ++j)
        if (!PyLong_CheckExact(PySequence_Fast_ITEMS(value)[j])) return false;
    } else if (is_tensor_type(sarg.real_type()) && !plan.allow_numbers && value != Py_None) {
      return false;  // toIValue would refuse it on every call
    }
    c10::IValue iv;
    if (!convert(value, sarg, &iv)) return false;
    plan.stack[i] = iv;
    bool identity = !plan.rewritten[i] && (PyFloat_CheckExact(a) || PyComplex_CheckExact(a));
    Py_INCREF(a);
    plan.fixed.push_back({static_cast<size_t>(i), a, iv, sarg.real_type(), identity, i,
                          nullptr});
  }
  Py_ssize_t used = 0;
  for (size_t i = n; i < sargs.size(); ++i) {
    const auto& sarg = sargs[i];
    PyObject* value = kwargs != Py_None
        ? PyDict_GetItemString(kwargs, sarg.name().c_str()) : nullptr;
    if (value != nullptr) {
      c10::IValue iv;
      if (!convert(value, sarg, &iv)) return false;
      plan.stack[i] = iv;
      bool identity = PyFloat_CheckExact(value) || PyComplex_CheckExact(value);
      Py_INCREF(value);
      PyObject* key = PyUnicode_FromString(sarg.name().c_str());
      if (!key) return false;
      plan.fixed.push_back({i, value, iv, sarg.real_type(), identity, -1, key});
      ++used;
    } else if (sarg.default_value().has_value()) {
      plan.stack[i] = *sarg.default_value();
    } else {
      return false;
    }
  }
  return kwargs == Py_None || used == PyDict_GET_SIZE(kwargs);
}

// compile(func, args, kwargs, rewrite, outs, container, returns_arg, local, boxes, moves,
//         lists) -> capsule, or None: the entry stays with the Python entry (an unusual
// schema or argument). Fields as in dispatch._FastPlan; outs: per output (spec, tspec,
// shape, stride, dtype, layout).
PyObject* compile(PyObject* /*module*/, PyObject* const* argv, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  if (nargs != 11) {
    PyErr_SetString(PyExc_TypeError, "compile takes 11 arguments");
    return nullptr;
  }
  PyObject* func = argv[0];
  PyObject* args = argv[1];
  PyObject* kwargs = argv[2];
  PyObject* rewrite = argv[3];
  PyObject* outs = argv[4];
  PyObject* container = argv[5];
  PyObject* returns_arg = argv[6];
  PyObject* local = argv[7];
  PyObject* boxes = argv[8];
  PyObject* moves = argv[9];
  PyObject* lists = argv[10];
  if (!PyTuple_CheckExact(args) || !PyTuple_CheckExact(rewrite) || !PyTuple_CheckExact(outs) ||
      !PyTuple_CheckExact(moves) || !PyTuple_CheckExact(lists) ||
      (kwargs != Py_None && !PyDict_CheckExact(kwargs))) {
    PyErr_SetString(PyExc_TypeError, "compile: args, rewrite, outs, moves and lists are "
                                     "tuples, kwargs a dict or None");
    return nullptr;
  }
  py::handle f(func);
  auto schema_obj = f.attr("_schema");
  std::string name = py::cast<std::string>(schema_obj.attr("name"));
  std::string overload = py::cast<std::string>(schema_obj.attr("overload_name"));
  auto handle = c10::Dispatcher::singleton().findSchema({name, overload});
  if (!handle.has_value()) Py_RETURN_NONE;
  const auto& schema = handle->schema();
  const auto& sargs = schema.arguments();
  const auto& returns = schema.returns();
  auto plan = std::make_unique<Plan>(*handle);
  std::string unqualified = name.substr(name.find("::") + 2);
  plan->allow_numbers = name.rfind("prims::", 0) == 0 ||
                        (name.rfind("aten::", 0) == 0 &&
                         torch::should_allow_numbers_as_tensors(unqualified));
  torch::jit::ToIValueAllowNumbersAsTensors allow(plan->allow_numbers);
  Py_ssize_t n = PyTuple_GET_SIZE(args);
  if (static_cast<size_t>(n) > sargs.size()) Py_RETURN_NONE;
  plan->nargs = n;
  plan->kinds.assign(n, Kind::Fixed);
  plan->rewritten.assign(n, nullptr);
  std::vector<PyObject*> move_of(n, nullptr);
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(rewrite); ++i) {
    PyObject* pair = PyTuple_GET_ITEM(rewrite, i);
    Py_ssize_t pos = PyLong_AsSsize_t(PyTuple_GET_ITEM(pair, 0));
    if (pos < 0 || pos >= n) Py_RETURN_NONE;
    plan->rewritten[pos] = plan->keep(PyTuple_GET_ITEM(pair, 1));
  }
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(moves); ++i) {
    PyObject* pair = PyTuple_GET_ITEM(moves, i);
    Py_ssize_t pos = PyLong_AsSsize_t(PyTuple_GET_ITEM(pair, 0));
    if (pos < 0 || pos >= n) Py_RETURN_NONE;
    move_of[pos] = plan->keep(PyTuple_GET_ITEM(pair, 1));
  }
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(lists); ++i) {
    Py_ssize_t pos = PyLong_AsSsize_t(PyTuple_GET_ITEM(lists, i));
    if (pos < 0 || pos >= n) Py_RETURN_NONE;
    plan->kinds[pos] = Kind::DTensorList;
  }
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* kind = reinterpret_cast<PyObject*>(Py_TYPE(PyTuple_GET_ITEM(args, i)));
    if (plan->rewritten[i] != nullptr) continue;  // what the entry passes instead
    if (kind == g_cls)
      plan->kinds[i] = Kind::DTensor;
    else if (kind == THPVariableClass)
      plan->kinds[i] = Kind::Plain;
    if (plan->kinds[i] != Kind::Fixed)
      plan->tensors.push_back({static_cast<size_t>(i), plan->kinds[i], move_of[i]});
  }
  plan->returns_arg = returns_arg == Py_None ? -1 : PyLong_AsSsize_t(returns_arg);
  if (container == Py_None) {
    plan->container = 0;
  } else if (container == reinterpret_cast<PyObject*>(&PyTuple_Type)) {
    plan->container = 1;
  } else if (container == reinterpret_cast<PyObject*>(&PyList_Type)) {
    plan->container = 2;
  } else {
    Py_RETURN_NONE;
  }
  if (local != Py_None) {
    plan->func = plan->keep(func);
    plan->local = plan->keep(local);
    plan->boxes = plan->keep(boxes);
  } else if (!prepare_stack(*plan, schema, args, kwargs)) {
    if (PyErr_Occurred()) return nullptr;
    Py_RETURN_NONE;
  }
  if (local == Py_None) {  // the op's returns: one Tensor, one Tensor[], or several Tensors
    plan->list_return = false;
    for (const auto& r : returns) {
      auto k = r.real_type()->kind();
      if (k == c10::TypeKind::ListType && returns.size() == 1) {
        auto elem = r.real_type()->castRaw<c10::ListType>()->getElementType();
        if (elem->kind() != c10::TypeKind::TensorType) Py_RETURN_NONE;
        plan->list_return = true;
      } else if (k != c10::TypeKind::TensorType) {
        Py_RETURN_NONE;
      }
    }
    if ((plan->container == 0 && (returns.size() != 1 || plan->list_return)) ||
        (plan->container == 1 && plan->list_return) ||
        (plan->container == 2 && !plan->list_return))
      Py_RETURN_NONE;
  }
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(outs); ++i) {
    PyObject* o = PyTuple_GET_ITEM(outs, i);
    Out out;
    out.spec = PyTuple_GET_ITEM(o, 0);
    out.tspec = PyTuple_GET_ITEM(o, 1);
    out.sizes = py::cast<std::vector<int64_t>>(PyTuple_GET_ITEM(o, 2));
    out.strides = py::cast<std::vector<int64_t>>(PyTuple_GET_ITEM(o, 3));
    out.dtype = torch::jit::toIValue(PyTuple_GET_ITEM(o, 4), c10::ScalarTypeType::get())
                    .toScalarType();
    out.layout = torch::jit::toIValue(PyTuple_GET_ITEM(o, 5), c10::LayoutType::get())
                     .toLayout();
    Py_INCREF(out.spec);
    Py_INCREF(out.tspec);
    plan->outs.push_back(std::move(out));
  }
  if (plan->outs.empty() && plan->returns_arg < 0) Py_RETURN_NONE;
  return PyCapsule_New(plan.release(), kCapsule, free_plan);
  END_HANDLE_TH_ERRORS
}

Py_ssize_t member_offset(PyObject* cls, const char* name) {
  PyObject* d = PyDict_GetItemString(reinterpret_cast<PyTypeObject*>(cls)->tp_dict, name);
  if (!d || Py_TYPE(d) != &PyMemberDescr_Type) return -1;
  auto* m = reinterpret_cast<PyMemberDescrObject*>(d)->d_member;
  return m->type == T_OBJECT_EX ? m->offset : -1;
}

Py_ssize_t offset_of(PyObject* cls, const char* name) {
  Py_ssize_t off = member_offset(cls, name);
  if (off < 0)
    PyErr_Format(PyExc_TypeError, "bind: %s must declare the slot %s",
                 reinterpret_cast<PyTypeObject*>(cls)->tp_name, name);
  return off;
}

// bind(DTensor, torch_dispatch, scalar_types, records, check_plain, env, debug_env,
//      TensorSpec, DTensorSpec, _FastPlan, raise_in_dispatch)
PyObject* bind(PyObject* /*module*/, PyObject* const* argv, Py_ssize_t nargs) {
  if (nargs != 11 || !PyType_Check(argv[0]) || !PyAnySet_Check(argv[2]) ||
      !PyType_Check(argv[7]) || !PyType_Check(argv[8]) || !PyType_Check(argv[9])) {
    PyErr_SetString(PyExc_TypeError, "bind(DTensor, torch_dispatch, scalar_types, records, "
                                     "check_plain, env, debug_env, TensorSpec, DTensorSpec, "
                                     "_FastPlan, raise_in_dispatch)");
    return nullptr;
  }
  Py_ssize_t offsets[] = {offset_of(argv[0], "_local_tensor"), offset_of(argv[0], "_spec"),
                          offset_of(argv[0], "_tspec"), offset_of(argv[7], "_hash"),
                          offset_of(argv[8], "mesh"), offset_of(argv[9], "native")};
  for (Py_ssize_t off : offsets)
    if (off < 0) return nullptr;
  g_off_local = offsets[0];
  g_off_spec = offsets[1];
  g_off_tspec = offsets[2];
  g_off_hash = offsets[3];
  g_off_mesh = offsets[4];
  g_off_native = offsets[5];
  PyObject** targets[] = {&g_cls, &g_fallback, &g_scalar_types, &g_records, &g_check_plain,
                          &g_env, &g_debug_env};
  for (int i = 0; i < 7; ++i) {
    Py_INCREF(argv[i]);
    Py_XSETREF(*targets[i], argv[i]);
  }
  Py_INCREF(argv[10]);
  Py_XSETREF(g_reraise, argv[10]);
  PyTypeObject** types[] = {&g_tspec_type, &g_dspec_type, &g_entry_type};
  for (int i = 0; i < 3; ++i) {
    Py_INCREF(argv[7 + i]);
    Py_XSETREF(*types[i], reinterpret_cast<PyTypeObject*>(argv[7 + i]));
  }
  Py_RETURN_NONE;
}

PyObject* taken(PyObject* /*module*/, PyObject* /*unused*/) {
  return PyLong_FromUnsignedLongLong(g_taken);
}

PyMethodDef methods[] = {
    {"dispatch", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(dispatch)),
     METH_FASTCALL, "DTensor.__torch_dispatch__(cls, func, types, args, kwargs)"},
    {"compile", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(compile)),
     METH_FASTCALL, "A fast-path entry's compiled plan, or None"},
    {"bind", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(bind)), METH_FASTCALL,
     "Bind the DTensor class and the Python entry"},
    {"taken", taken, METH_NOARGS, "How many calls the compiled entry ran itself"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "dtensor_native", nullptr, -1, methods};

}  // namespace

#ifndef DTENSOR_NATIVE_SOURCE_HASH
#define DTENSOR_NATIVE_SOURCE_HASH unknown
#endif
#define DTENSOR_STRINGIFY_(x) #x
#define DTENSOR_STRINGIFY(x) DTENSOR_STRINGIFY_(x)

PyMODINIT_FUNC PyInit_dtensor_native() {
  PyObject* m = PyModule_Create(&module_def);
  if (!m) return nullptr;
  struct {
    PyObject** target;
    const char* text;
  } names[] = {{&s_op, "_op"}, {&s_pinned, "_pinned"}, {&s_mesh, "mesh"},
               {&s_dict, "__dict__"}, {&s_fast_plans, "_fast_plans"}, {&s_native, "native"},
               {&s_shape, "shape"}, {&s_stride, "stride"}, {&s_dtype, "dtype"},
               {&s_device, "device"}};
  for (auto& n : names) {
    *n.target = PyUnicode_InternFromString(n.text);
    if (!*n.target) return nullptr;
  }
  g_debug_key = PyBytes_FromString("DTENSOR_DEBUG");
  if (!g_debug_key) return nullptr;
  if (PyModule_AddStringConstant(m, "SOURCE_HASH",
                                 DTENSOR_STRINGIFY(DTENSOR_NATIVE_SOURCE_HASH)) < 0)
    return nullptr;
  return m;
}
