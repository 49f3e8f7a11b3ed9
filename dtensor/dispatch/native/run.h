// Running a plan: the op on a prepared stack (or the local function), then the wrappers.
// Part of the one translation unit fast_dispatch.cpp (torch's headers compile once);
// Note [native fast path] in dtensor/dispatch/native/__init__.py.
#pragma once

#include "state.h"

namespace dtensor_native {

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

}  // namespace dtensor_native
