// What the compiled entry holds: the bound Python objects, the slots it reads, a plan.
// Part of the one translation unit fast_dispatch.cpp (torch's headers compile once);
// Note [native fast path] in dtensor/dispatch/native/__init__.py.
#pragma once

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

namespace dtensor_native {

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

const char* kCapsule = "dtensor.dispatch.native.Plan";

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

}  // namespace dtensor_native
