// The fast-table key, built and hashed as dtensor.dispatch.torch_dispatch builds it.
// Part of the one translation unit fast_dispatch.cpp (torch's headers compile once);
// Note [native fast path] in dtensor/dispatch/native/__init__.py.
#pragma once

#include "state.h"

namespace dtensor_native {

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
  if (*hash == -1) {
    // a spec of symbolic sizes has no hash (Note [symbolic sizes] in dtensor.symbolic): the
    // Python entry plans such a call without a cache
    if (PyErr_ExceptionMatches(PyExc_TypeError)) {
      PyErr_Clear();
      *go_python = true;
    }
    return nullptr;
  }
  *mesh_out = mesh;
  return key.tuple();
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

}  // namespace dtensor_native
