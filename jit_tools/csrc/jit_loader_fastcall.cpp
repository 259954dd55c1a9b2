// The loader's Python entry to a dispatcher op: what torch's generated bindings (torch.sigmoid)
// do for aten ops, for an op of ours. Built once per exact torch build and Python as a shared
// piece (jit_tools/builder/shared.py) and used by jit_tools/fastcall.py.
//
// A call through torch.ops (OpOverload._op) converts every argument through the schema's
// generic Python-to-IValue path and every result back, which costs more than the whole of
// torch.sigmoid on a small CPU tensor. Here the schema is read once, when the entry is made:
// each argument gets a converter for its type, and a call converts exactly what it was given.
// Anything unusual goes to the OpOverload itself (the fallback), which is the reference
// behaviour: a tensor subclass or a torch function mode (__torch_function__ runs there), an
// argument of a type the converter does not take, an unknown or repeated keyword, a missing
// argument. So the fallback also raises torch's own messages for bad calls.
//
// The op is called boxed, from the top of the dispatcher, with the GIL released (as torch's
// bindings do), so autograd, autocast, vmap and dispatch modes apply as they do through
// torch.ops.
#include <Python.h>

#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace {

enum class Kind : uint8_t { Tensor, Int, Float, Bool, Str, IntList, FloatList, BoolList };

struct ArgSpec {
  Kind kind;
  bool optional;
  bool kwarg_only;
  int64_t fixed_size;  // N of int[N] and bool[N], else -1
  std::string name;
  std::optional<c10::IValue> default_value;
};

struct Entry {
  std::optional<c10::OperatorHandle> op;  // empty once retired: every call falls back
  PyObject* fallback = nullptr;           // the OpOverload (a strong reference)
  std::vector<ArgSpec> args;
  size_t positional = 0;  // arguments that may be given by position
  std::string display;    // "ns.op" (".overload" unless default), for explained errors
  bool explain = false;   // rewrite a wrong argument's error in one line (explain_bad_argument)
};

constexpr const char* kCapsule = "jit_loader_fastcall.Entry";

// --- the schema, read once --------------------------------------------------------------

std::optional<Kind> kind_of(const c10::TypePtr& type) {
  switch (type->kind()) {
    case c10::TypeKind::TensorType: return Kind::Tensor;
    case c10::TypeKind::IntType:
    case c10::TypeKind::SymIntType: return Kind::Int;
    case c10::TypeKind::FloatType: return Kind::Float;
    case c10::TypeKind::BoolType: return Kind::Bool;
    case c10::TypeKind::StringType: return Kind::Str;
    case c10::TypeKind::ListType: {
      const auto elem = type->castRaw<c10::ListType>()->getElementType()->kind();
      if (elem == c10::TypeKind::IntType || elem == c10::TypeKind::SymIntType) return Kind::IntList;
      if (elem == c10::TypeKind::FloatType) return Kind::FloatList;
      if (elem == c10::TypeKind::BoolType) return Kind::BoolList;
      return std::nullopt;
    }
    default: return std::nullopt;
  }
}

bool supported_return(const c10::TypePtr& type) {
  c10::TypePtr t = type;
  if (t->kind() == c10::TypeKind::OptionalType) {
    t = t->castRaw<c10::OptionalType>()->getElementType();
  }
  switch (t->kind()) {
    case c10::TypeKind::TensorType:
    case c10::TypeKind::IntType:
    case c10::TypeKind::FloatType:
    case c10::TypeKind::BoolType:
      return true;
    default:
      return false;
  }
}

// The entry's argument converters; an empty string, or the reason the schema is not taken.
std::string read_schema(const c10::FunctionSchema& schema, Entry& entry) {
  if (schema.is_vararg() || schema.is_varret()) return "variadic arguments or returns";
  for (const auto& ret : schema.returns()) {
    if (!supported_return(ret.type())) return "return type " + ret.type()->str();
  }
  for (const auto& arg : schema.arguments()) {
    // real_type: ScalarType, Layout and MemoryFormat, which type() reads as int, are refused.
    c10::TypePtr type = arg.real_type();
    const bool optional = type->kind() == c10::TypeKind::OptionalType;
    if (optional) type = type->castRaw<c10::OptionalType>()->getElementType();
    const auto kind = kind_of(type);
    if (!kind) return "argument " + arg.name() + " of type " + arg.type()->str();
    entry.args.push_back({*kind, optional, arg.kwarg_only(), arg.N() ? int64_t(*arg.N()) : -1,
                          arg.name(), arg.default_value()});
    if (!arg.kwarg_only()) entry.positional = entry.args.size();
  }
  return "";
}

// --- one call -----------------------------------------------------------------------------

bool exact_int(PyObject* obj, int64_t& out) {
  if (!PyLong_CheckExact(obj)) return false;
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
  if (overflow != 0 || (v == -1 && PyErr_Occurred())) {
    PyErr_Clear();
    return false;
  }
  out = v;
  return true;
}

bool exact_float(PyObject* obj, double& out) {
  if (PyFloat_CheckExact(obj)) {
    out = PyFloat_AS_DOUBLE(obj);
    return true;
  }
  int64_t i = 0;
  if (exact_int(obj, i)) {
    out = double(i);
    return true;
  }
  return false;
}

template <typename T, typename Read>
bool read_list(PyObject* obj, int64_t fixed_size, Read read, std::vector<T>& out) {
  if (!PyList_Check(obj) && !PyTuple_Check(obj)) return false;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(obj);
  if (fixed_size >= 0 && n != fixed_size) return false;
  PyObject** items = PySequence_Fast_ITEMS(obj);
  out.reserve(size_t(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    T v{};
    if (!read(items[i], v)) return false;
    out.push_back(v);
  }
  return true;
}

bool exact_bool(PyObject* obj, bool& out) {
  if (!PyBool_Check(obj)) return false;
  out = obj == Py_True;
  return true;
}

// Pushes obj converted for arg; false where the fallback must take the call.
bool push(const ArgSpec& arg, PyObject* obj, torch::jit::Stack& stack) {
  if (obj == Py_None) {
    if (!arg.optional) return false;
    stack.emplace_back();
    return true;
  }
  switch (arg.kind) {
    case Kind::Tensor:
      // Tensor and Parameter only: a subclass may define __torch_function__.
      if (!THPVariable_CheckExact(obj)) return false;
      stack.emplace_back(THPVariable_Unpack(obj));
      return true;
    case Kind::Int: {
      int64_t v = 0;
      if (!exact_int(obj, v)) return false;
      stack.emplace_back(v);
      return true;
    }
    case Kind::Float: {
      double v = 0;
      if (!exact_float(obj, v)) return false;
      stack.emplace_back(v);
      return true;
    }
    case Kind::Bool: {
      bool v = false;
      if (!exact_bool(obj, v)) return false;
      stack.emplace_back(v);
      return true;
    }
    case Kind::Str: {
      if (!PyUnicode_CheckExact(obj)) return false;
      Py_ssize_t size = 0;
      const char* text = PyUnicode_AsUTF8AndSize(obj, &size);
      if (text == nullptr) {
        PyErr_Clear();
        return false;
      }
      stack.emplace_back(std::string(text, size_t(size)));
      return true;
    }
    case Kind::IntList: {
      std::vector<int64_t> v;
      int64_t one = 0;
      if (arg.fixed_size > 0 && exact_int(obj, one)) {  // int[2] takes one int for both
        v.assign(size_t(arg.fixed_size), one);
      } else if (!read_list<int64_t>(obj, arg.fixed_size, exact_int, v)) {
        return false;
      }
      stack.emplace_back(std::move(v));
      return true;
    }
    case Kind::FloatList: {
      std::vector<double> v;
      if (!read_list<double>(obj, arg.fixed_size, exact_float, v)) return false;
      stack.emplace_back(std::move(v));
      return true;
    }
    case Kind::BoolList: {
      std::vector<bool> v;
      if (!read_list<bool>(obj, arg.fixed_size, exact_bool, v)) return false;
      c10::List<bool> list;
      list.reserve(v.size());
      for (const bool b : v) list.push_back(b);
      stack.emplace_back(std::move(list));
      return true;
    }
  }
  return false;
}

bool parse(const Entry& e, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames,
           torch::jit::Stack& stack) {
  const size_t n = e.args.size();
  if (size_t(nargs) > e.positional) return false;
  PyObject* given[64];
  if (n > 64) return false;
  for (size_t i = 0; i < n; ++i) given[i] = i < size_t(nargs) ? args[i] : nullptr;
  const Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t k = 0; k < nkw; ++k) {
    PyObject* key = PyTuple_GET_ITEM(kwnames, k);
    size_t i = 0;
    while (i < n && PyUnicode_CompareWithASCIIString(key, e.args[i].name.c_str()) != 0) ++i;
    if (i == n || given[i] != nullptr) return false;
    given[i] = args[nargs + k];
  }
  stack.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (given[i] != nullptr) {
      if (!push(e.args[i], given[i], stack)) return false;
    } else if (e.args[i].default_value) {
      stack.push_back(*e.args[i].default_value);
    } else {
      return false;
    }
  }
  return true;
}

PyObject* to_python(c10::IValue&& v) {
  if (v.isTensor()) return THPVariable_Wrap(std::move(v).toTensor());  // undefined: None
  if (v.isNone()) Py_RETURN_NONE;
  if (v.isInt()) return PyLong_FromLongLong(v.toInt());
  if (v.isDouble()) return PyFloat_FromDouble(v.toDouble());
  if (v.isBool()) return PyBool_FromLong(v.toBool());
  PyErr_Format(PyExc_TypeError, "jit_loader fastcall: unexpected result %s", v.tagKind().c_str());
  return nullptr;
}

PyObject* results(torch::jit::Stack& stack) {
  if (stack.empty()) Py_RETURN_NONE;
  if (stack.size() == 1) return to_python(std::move(stack[0]));
  PyObject* tuple = PyTuple_New(Py_ssize_t(stack.size()));
  if (tuple == nullptr) return nullptr;
  for (size_t i = 0; i < stack.size(); ++i) {
    PyObject* item = to_python(std::move(stack[i]));
    if (item == nullptr) {
      Py_DECREF(tuple);
      return nullptr;
    }
    PyTuple_SET_ITEM(tuple, Py_ssize_t(i), item);
  }
  return tuple;
}

// --- a wrong argument, explained ------------------------------------------------------------

const char* expected_type(const ArgSpec& arg) {
  switch (arg.kind) {
    case Kind::Tensor: return "a Tensor";
    case Kind::Int: return "an int";
    case Kind::Float: return "a float";
    case Kind::Bool: return "a bool";
    case Kind::Str: return "a str";
    case Kind::IntList: return "a list of ints";
    case Kind::FloatList: return "a list of floats";
    case Kind::BoolList: return "a list of bools";
  }
  return "another type";
}

// "None", or the type and a short repr: "int 3", "str 'abc'".
std::string describe(PyObject* obj) {
  if (obj == Py_None) return "None";
  std::string out = Py_TYPE(obj)->tp_name;
  PyObject* repr = PyObject_Repr(obj);
  if (repr != nullptr) {
    const char* text = PyUnicode_AsUTF8(repr);
    if (text != nullptr) {
      std::string r(text);
      if (r.size() > 60) r = r.substr(0, 57) + "...";
      out += " " + r;
    }
    Py_DECREF(repr);
  }
  PyErr_Clear();
  return out;
}

// The call raised through the fallback: where that is because a tensor argument got None or
// a non-tensor, or because torch's conversion names an argument of the wrong type, the error
// becomes one TypeError line naming the op, the argument and the value, instead of the
// dispatcher's text (up to 49 lines for an op whose only tensor is None). Only ever on the
// error path; any other error stays as raised.
void explain_bad_argument(const Entry& e, PyObject* const* args, Py_ssize_t nargs,
                          PyObject* kwnames) {
  if (!PyErr_ExceptionMatches(PyExc_RuntimeError) && !PyErr_ExceptionMatches(PyExc_TypeError) &&
      !PyErr_ExceptionMatches(PyExc_NotImplementedError)) {
    return;
  }
  PyObject *type = nullptr, *exc = nullptr, *tb = nullptr;
  PyErr_Fetch(&type, &exc, &tb);  // no Python call below may run with an error set
  PyErr_NormalizeException(&type, &exc, &tb);
  const size_t n = e.args.size();
  std::vector<PyObject*> given(n, nullptr);
  for (size_t i = 0; i < n && i < size_t(nargs); ++i) given[i] = args[i];
  const Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t k = 0; k < nkw; ++k) {
    PyObject* key = PyTuple_GET_ITEM(kwnames, k);
    for (size_t i = 0; i < n; ++i) {
      if (PyUnicode_CompareWithASCIIString(key, e.args[i].name.c_str()) == 0) given[i] = args[nargs + k];
    }
  }
  const ArgSpec* bad = nullptr;
  PyObject* value = nullptr;
  for (size_t i = 0; i < n && bad == nullptr; ++i) {
    PyObject* obj = given[i];
    if (obj == nullptr || e.args[i].kind != Kind::Tensor) continue;
    const bool wrong = obj == Py_None ? !e.args[i].optional
                                      : !THPVariable_Check(obj) &&
                                            !PyObject_HasAttrString(obj, "__torch_function__");
    if (wrong) bad = &e.args[i], value = obj;
  }
  if (bad == nullptr && exc != nullptr) {  // torch's conversion names an argument it refused
    PyObject* text = PyObject_Str(exc);
    const char* message = text ? PyUnicode_AsUTF8(text) : nullptr;
    if (message != nullptr && std::strstr(message, "Expected a value of type") != nullptr) {
      for (size_t i = 0; i < n && bad == nullptr; ++i) {
        const std::string named = "for argument '" + e.args[i].name + "'";
        if (given[i] != nullptr && std::strstr(message, named.c_str()) != nullptr) {
          bad = &e.args[i], value = given[i];
        }
      }
    }
    Py_XDECREF(text);
  }
  const std::string line = bad == nullptr ? std::string()
                                          : e.display + ": " + bad->name + " must be " +
                                                expected_type(*bad) +
                                                (bad->optional ? " or None" : "") + ", got " +
                                                describe(value);
  PyErr_Clear();
  if (bad == nullptr) {
    PyErr_Restore(type, exc, tb);
    return;
  }
  Py_XDECREF(type);
  Py_XDECREF(exc);
  Py_XDECREF(tb);
  PyErr_SetString(PyExc_TypeError, line.c_str());
}

struct GilRelease {
  PyThreadState* state = PyEval_SaveThread();
  GilRelease() = default;
  GilRelease(const GilRelease&) = delete;
  GilRelease& operator=(const GilRelease&) = delete;
  ~GilRelease() { PyEval_RestoreThread(state); }
};

PyObject* call(PyObject* capsule, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  auto* e = static_cast<Entry*>(PyCapsule_GetPointer(capsule, kCapsule));
  if (e == nullptr) return nullptr;
  HANDLE_TH_ERRORS
  if (e->op && !at::impl::torch_function_mode_enabled()) {
    torch::jit::Stack stack;
    if (parse(*e, args, nargs, kwnames, stack)) {
      {
        GilRelease release;
        e->op->callBoxed(stack);
      }
      return results(stack);
    }
  }
  PyObject* out = PyObject_Vectorcall(e->fallback, args, size_t(nargs), kwnames);
  if (out == nullptr && e->explain) explain_bad_argument(*e, args, nargs, kwnames);
  return out;
  END_HANDLE_TH_ERRORS
}

PyMethodDef call_def = {"fastcall", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(call)),
                        METH_FASTCALL | METH_KEYWORDS,
                        "The op, called through the loader's Python entry."};

void destroy(PyObject* capsule) {
  auto* e = static_cast<Entry*>(PyCapsule_GetPointer(capsule, kCapsule));
  if (e != nullptr) {
    Py_XDECREF(e->fallback);
    delete e;
  }
}

// make(fallback, name, overload_name, explain=False) -> callable; ValueError for a schema it
// does not take. explain: a wrong argument's error is rewritten (explain_bad_argument).
PyObject* make(PyObject*, PyObject* args) {
  PyObject* fallback = nullptr;
  const char* name = nullptr;
  const char* overload = nullptr;
  int explain = 0;
  if (!PyArg_ParseTuple(args, "Oss|p", &fallback, &name, &overload, &explain)) return nullptr;
  HANDLE_TH_ERRORS
  auto entry = std::make_unique<Entry>();
  entry->explain = explain != 0;
  entry->display = name;
  const size_t sep = entry->display.find("::");
  if (sep != std::string::npos) entry->display.replace(sep, 2, ".");
  if (overload[0] != '\0') entry->display += std::string(".") + overload;
  entry->op = c10::Dispatcher::singleton().findSchemaOrThrow(name, overload);
  const std::string refused = read_schema(entry->op->schema(), *entry);
  if (!refused.empty()) {
    PyErr_Format(PyExc_ValueError, "%s.%s: not taken by the fast entry: %s", name, overload,
                 refused.c_str());
    return nullptr;
  }
  Py_INCREF(fallback);
  entry->fallback = fallback;
  PyObject* capsule = PyCapsule_New(entry.get(), kCapsule, destroy);
  if (capsule == nullptr) {
    Py_DECREF(fallback);
    return nullptr;
  }
  entry.release();
  PyObject* fn = PyCFunction_New(&call_def, capsule);
  Py_DECREF(capsule);
  return fn;
  END_HANDLE_TH_ERRORS
}

// retire(callable): its operator entry is about to be freed; every later call falls back.
PyObject* retire(PyObject*, PyObject* fn) {
  if (!PyCFunction_Check(fn) || PyCFunction_GET_FUNCTION(fn) != call_def.ml_meth) {
    PyErr_SetString(PyExc_TypeError, "retire: not a fast entry");
    return nullptr;
  }
  auto* e = static_cast<Entry*>(PyCapsule_GetPointer(PyCFunction_GET_SELF(fn), kCapsule));
  if (e == nullptr) return nullptr;
  e->op.reset();
  Py_RETURN_NONE;
}

PyMethodDef methods[] = {
    {"make", make, METH_VARARGS,
     "make(fallback, name, overload_name, explain=False) -> the op's fast entry"},
    {"retire", retire, METH_O, "retire(entry): every later call goes to the fallback"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "jit_loader_fastcall",
                          "The loader's fast Python entry to dispatcher ops.", -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit_jit_loader_fastcall() {
  return PyModule_Create(&module_def);
}
