// The dispatcher's cached case in compiled code: Note [native fast path] in
// dtensor/dispatch/native/__init__.py. Key, lookup, local call and rewrap mirror
// dtensor.dispatch.torch_dispatch exactly; whatever this file does not handle is
// handed, untouched, to that Python function (the `fallback`).
// The parts: state.h (what it holds), key.h (the key), run.h (a call), compile.h (a plan).
#include "compile.h"
#include "key.h"
#include "run.h"
#include "state.h"

namespace dtensor_native {

// run(): an op's C++ exception becomes a Python error here, so that it is raised again from
// reraise_in_dispatch's frame
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

}  // namespace dtensor_native

using namespace dtensor_native;

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
