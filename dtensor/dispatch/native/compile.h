// Compiling a fast-path entry into a plan, once, when the general path records it.
// Part of the one translation unit fast_dispatch.cpp (torch's headers compile once);
// Note [native fast path] in dtensor/dispatch/native/__init__.py.
#pragma once

#include "state.h"

namespace dtensor_native {

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

}  // namespace dtensor_native
