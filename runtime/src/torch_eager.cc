// Python's header first, as it asks.
#include <Python.h>

#include "opgen/torch_eager.h"

#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "opgen/device_memory.h"
#include "opgen/shape_source.h"

#if defined(OPGEN_TORCH_EAGER) && OPGEN_TORCH_EAGER
#include <ATen/dlpack.h>
#endif

namespace opgen::torch_eager {

#if defined(OPGEN_TORCH_EAGER) && OPGEN_TORCH_EAGER

namespace {

const DLPackExchangeAPI* g_api = nullptr;  // torch's, once use_api took it
PyTypeObject* g_types[2] = {};               // the tensor types it reads (torch.Tensor, torch.nn.Parameter)
PyObject* g_unread[8] = {};                  // predicates of a tensor of those types it must not read
size_t g_unread_count = 0;
PyObject* g_requires_grad = nullptr;         // "requires_grad", interned

bool plain_type(PyObject* object) {
  for (PyTypeObject* t : g_types) {
    if (t != nullptr && Py_TYPE(object) == t) return true;
  }
  return false;
}

DType dtype_of(const DLDataType& t) {
  if (t.lanes != 1) return DType::kUnknown;
#define OPGEN_DTYPE_OF_DLPACK(e, name, cpp, xla, python, size, dlpack) \
  if (t.code == kDL##dlpack && t.bits == 8 * (size)) return DType::e;
  OPGEN_DTYPES(OPGEN_DTYPE_OF_DLPACK)
#undef OPGEN_DTYPE_OF_DLPACK
  return DType::kUnknown;
}

DLDataType dlpack_of(DType d) {
  switch (d) {
#define OPGEN_DLPACK_OF_DTYPE(e, name, cpp, xla, python, size, dlpack) \
  case DType::e: return {static_cast<uint8_t>(kDL##dlpack), static_cast<uint8_t>(8 * (size)), 1};
    OPGEN_DTYPES(OPGEN_DLPACK_OF_DTYPE)
#undef OPGEN_DLPACK_OF_DTYPE
    case DType::kUnknown: break;
  }
  return {static_cast<uint8_t>(kDLOpaqueHandle), 0, 0};  // torch's allocator refuses it
}

// The allocator's SetError: keeps the message for the Status.
void keep_error(void* text, const char* kind, const char* message) {
  *static_cast<std::string*>(text) = std::string(kind) + ": " + message;
}

void release(DLManagedTensorVersioned* m) {
  if (m != nullptr && m->deleter != nullptr) m->deleter(m);
}

// A plain eager call as a Source: the inputs read through DLPack, the
// attributes from their dict, the outputs and workspaces from torch's allocator.
class EagerSource : public EagerCall {
 public:
  static constexpr size_t kMaxInputs = 64;
  static constexpr size_t kMaxAttrs = 16;

  EagerSource(const char* op, PyObject* inputs, PyObject* attrs, uint64_t requested, bool grad_enabled);
  ~EagerSource() override;  // frees the outputs not handed over, and the workspaces
  EagerSource(const EagerSource&) = delete;
  EagerSource& operator=(const EagerSource&) = delete;

  bool readable() const override { return readable_; }
  int device_index() const override { return device_index_; }
  void* stream() const override { return stream_; }

  const TensorRef* input(size_t i) override { return i < count_ && present_[i] ? &refs_[i] : nullptr; }
  Status attr(size_t i, const char* name, AttrKind kind, AttrValue* value) override;
  Status output(size_t i, const char* name, const char* declared, DType dtype, const int64_t* dims, size_t rank,
                void** data) override;
  bool requested(size_t k) override { return (requested_ >> k) & 1; }
  Device device() const override { return cuda_ ? Device::kCuda : Device::kCpu; }
  bool allocates() const override { return true; }
  uint64_t memory() const override { return device_memory(device(), device_index_); }
  std::string device_name() const override { return cuda_ ? "cuda:" + std::to_string(device_index_) : "cpu"; }
  // One allocation for all of the call's workspaces.
  Status workspace(size_t i, const char* const* names, size_t count, size_t bytes, void** data) override;
  Dialect dialect() const override { return Dialect::kTorch; }

  // After a successful run: the outputs that alias no input, as the kernel's
  // schema returns them (a new reference), or null with a Python error set.
  PyObject* results();

 private:
  // A new dense tensor from torch's allocator on the call's device.
  Status allocate(const char* what, const char* name, DType dtype, const int64_t* dims, size_t rank,
                  DLManagedTensorVersioned** managed, void** data);

  const char* op_;
  size_t count_ = 0;
  PyObject* attrs_;
  uint64_t requested_;
  bool readable_ = false;
  bool cuda_ = false;
  int device_index_ = 0;
  void* stream_ = nullptr;
  TensorRef refs_[kMaxInputs];
  bool present_[kMaxInputs] = {};
  // Each attribute's value as read (the rules' Args may point into them until the call returns).
  ShapeSource::Attr values_[kMaxAttrs];
  std::vector<int32_t> narrow_[kMaxAttrs];  // i32[] attributes, narrowed
  DLManagedTensorVersioned* fresh_[Binder::kMaxOutputs] = {};  // handed over by results()
  size_t fresh_count_ = 0;
  DLManagedTensorVersioned* scratch_[Binder::kMaxOutputs] = {};  // the workspaces
  size_t scratch_count_ = 0;
};

}  // namespace

std::string use_api(const void* api, void* const* types, size_t count, void* const* unread, size_t unread_count) {
  const auto* a = static_cast<const DLPackExchangeAPI*>(api);
  if (a == nullptr) return "torch gave no DLPack exchange API";
  if (count == 0 || count > std::size(g_types)) return "the route reads one or two tensor types";
  for (size_t i = 0; i < count; ++i) {
    if (!PyType_Check(static_cast<PyObject*>(types[i]))) return "a tensor type that is no type";
  }
  if (unread_count > std::size(g_unread)) return "more predicates of unread tensors than the route keeps";
  for (size_t i = 0; i < unread_count; ++i) {
    if (!PyCallable_Check(static_cast<PyObject*>(unread[i]))) return "a predicate of unread tensors that is no callable";
  }
  if (a->header.version.major != DLPACK_MAJOR_VERSION) {
    return "torch's DLPack exchange API is of DLPack " + std::to_string(a->header.version.major) +
           ".x; this build reads " + std::to_string(DLPACK_MAJOR_VERSION) + ".x";
  }
  if (a->managed_tensor_allocator == nullptr || a->managed_tensor_to_py_object_no_sync == nullptr ||
      a->dltensor_from_py_object_no_sync == nullptr || a->current_work_stream == nullptr) {
    return "torch's DLPack exchange API lacks a function this route needs";
  }
  if (g_requires_grad == nullptr) g_requires_grad = PyUnicode_InternFromString("requires_grad");
  if (g_requires_grad == nullptr) {
    PyErr_Clear();
    return "no memory for a string";
  }
  for (size_t i = 0; i < std::size(g_types); ++i) {
    PyTypeObject* t = i < count ? reinterpret_cast<PyTypeObject*>(types[i]) : nullptr;
    Py_XINCREF(t);  // kept for the process's life, as torch's own types are
    g_types[i] = t;
  }
  for (size_t i = 0; i < unread_count; ++i) {
    g_unread[i] = static_cast<PyObject*>(unread[i]);
    Py_INCREF(g_unread[i]);
  }
  g_unread_count = unread_count;
  g_api = a;
  return "";
}

EagerSource::EagerSource(const char* op, PyObject* inputs, PyObject* attrs, uint64_t requested, bool grad_enabled)
    : op_(op), attrs_(attrs), requested_(requested) {
  const Py_ssize_t count = PyTuple_GET_SIZE(inputs);
  if (g_api == nullptr || count > static_cast<Py_ssize_t>(kMaxInputs)) return;
  count_ = static_cast<size_t>(count);
  bool any = false;
  for (size_t i = 0; i < count_; ++i) {
    PyObject* object = PyTuple_GET_ITEM(inputs, static_cast<Py_ssize_t>(i));
    if (object == Py_None) continue;
    // A subclass (a FakeTensor, a DTensor, ...) or a tensor that needs a
    // gradient takes another route; so does one whose flag cannot be read.
    if (!plain_type(object)) return;
    for (size_t k = 0; k < g_unread_count; ++k) {
      PyObject* said = PyObject_CallOneArg(g_unread[k], object);
      const int unread = said == nullptr ? -1 : PyObject_IsTrue(said);
      Py_XDECREF(said);
      if (unread != 0) {
        PyErr_Clear();
        return;
      }
    }
    if (grad_enabled) {
      PyObject* flag = PyObject_GetAttr(object, g_requires_grad);
      if (flag == nullptr) {
        PyErr_Clear();
        return;
      }
      const bool needs_grad = flag != Py_False;
      Py_DECREF(flag);
      if (needs_grad) return;
    }
    DLTensor t;
    if (g_api->dltensor_from_py_object_no_sync(object, &t) != 0) {
      PyErr_Clear();  // a tensor DLPack cannot describe (a conjugate view, say): the kernel's route takes it
      return;
    }
    const bool cuda = t.device.device_type == kDLCUDA;
    if (!cuda && t.device.device_type != kDLCPU) return;
    if (!any) {
      cuda_ = cuda;
      device_index_ = t.device.device_id;
      any = true;
    } else if (cuda != cuda_ || t.device.device_id != device_index_) {
      return;  // the kernel says which tensor is where
    }
    if (t.ndim < 0 || static_cast<size_t>(t.ndim) > Binder::kMaxRank) return;
    TensorRef& r = refs_[i];
    r.dtype = dtype_of(t.dtype);
    // A dtype opgen does not take: the kernel names torch's dtype. (A TensorRef
    // of kUnknown and no foreign name would pass for a legacy call's, unchecked.)
    if (r.dtype == DType::kUnknown) return;
    r.rank = static_cast<size_t>(t.ndim);
    r.dims = given_dims(t.shape);
    r.strides = t.strides;  // null: dense row-major, in DLPack as in a TensorRef
    if (t.data == nullptr) {
      // No memory of its own (a zero tensor, a functional tensor's wrapper):
      // only a tensor of no elements may be read so.
      bool empty = false;
      for (int32_t d = 0; d < t.ndim; ++d) empty |= t.shape[d] == 0;
      if (!empty) return;
    }
    r.data = static_cast<char*>(t.data) + t.byte_offset;
    present_[i] = true;
  }
  if (!any) return;
  if (cuda_ && g_api->current_work_stream(kDLCUDA, device_index_, &stream_) != 0) {
    PyErr_Clear();
    return;
  }
  readable_ = true;
}

EagerSource::~EagerSource() {
  for (size_t i = 0; i < fresh_count_; ++i) release(fresh_[i]);
  for (size_t i = 0; i < scratch_count_; ++i) release(scratch_[i]);
}

Status EagerSource::attr(size_t i, const char* name, AttrKind kind, AttrValue* value) {
  // Any failure here is the kernel's to report: it reads the same value through torch's schema.
  const auto refused = [&] {
    PyErr_Clear();
    return Status::InvalidArgument(std::string(op_) + ": attribute '" + name + "' is not one the eager route reads");
  };
  PyObject* v = i < kMaxAttrs ? PyDict_GetItemString(attrs_, name) : nullptr;
  if (v == nullptr) return refused();
  ShapeSource::Attr& a = values_[i];
  if (PyBool_Check(v)) {
    a.tag = ShapeSource::Attr::kBool;
    a.b = v == Py_True;
  } else if (PyLong_Check(v)) {
    a.tag = ShapeSource::Attr::kInt;
    int overflow = 0;
    a.i = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow != 0) return refused();
  } else if (PyFloat_Check(v)) {
    a.tag = ShapeSource::Attr::kFloat;
    a.f = PyFloat_AS_DOUBLE(v);
  } else if (PyUnicode_Check(v) || std::string_view(Py_TYPE(v)->tp_name) == "torch.dtype") {
    // An enum by name; a dtype by its name, which str() of a torch.dtype gives after "torch.".
    PyObject* text = PyUnicode_Check(v) ? (Py_INCREF(v), v) : PyObject_Str(v);
    if (text == nullptr) return refused();
    Py_ssize_t size = 0;
    const char* utf8 = PyUnicode_AsUTF8AndSize(text, &size);
    if (utf8 != nullptr) a.s.assign(utf8, static_cast<size_t>(size));
    Py_DECREF(text);
    if (utf8 == nullptr) return refused();
    if (!PyUnicode_Check(v) && a.s.rfind("torch.", 0) == 0) a.s.erase(0, 6);
    a.tag = ShapeSource::Attr::kStr;
  } else if (PyList_Check(v) || PyTuple_Check(v)) {
    a.tag = ShapeSource::Attr::kInts;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(v);
    a.ints.resize(static_cast<size_t>(n));
    for (Py_ssize_t k = 0; k < n; ++k) {
      PyObject* e = PySequence_Fast_GET_ITEM(v, k);
      int overflow = 0;
      if (!PyLong_Check(e) || PyBool_Check(e)) return refused();
      a.ints[static_cast<size_t>(k)] = PyLong_AsLongLongAndOverflow(e, &overflow);
      if (overflow != 0) return refused();
    }
  } else {
    return refused();
  }
  return ShapeSource::read_attr(op_, name, kind, a, narrow_[i], value);
}

Status EagerSource::allocate(const char* what, const char* name, DType dtype, const int64_t* dims, size_t rank,
                             DLManagedTensorVersioned** managed, void** data) {
  DLTensor prototype{};
  prototype.device = {cuda_ ? kDLCUDA : kDLCPU, device_index_};
  prototype.ndim = static_cast<int32_t>(rank);
  prototype.dtype = dlpack_of(dtype);
  prototype.shape = const_cast<int64_t*>(dims);  // read only
  std::string error;
  DLManagedTensorVersioned* out = nullptr;
  if (g_api->managed_tensor_allocator(&prototype, &out, &error, &keep_error) != 0 || out == nullptr) {
    PyErr_Clear();
    return Status::InvalidArgument(std::string(op_) + ": " + what + " '" + name + "' could not be allocated: " + error);
  }
  *managed = out;
  *data = static_cast<char*>(out->dl_tensor.data) + out->dl_tensor.byte_offset;
  return Status::Ok();
}

Status EagerSource::output(size_t, const char* name, const char*, DType dtype, const int64_t* dims, size_t rank,
                           void** data) {
  if (fresh_count_ == Binder::kMaxOutputs) return Status::Internal(std::string(op_) + ": too many outputs");
  return allocate("output", name, dtype, dims, rank, &fresh_[fresh_count_++], data);
}

Status EagerSource::workspace(size_t, const char* const* names, size_t count, size_t bytes, void** data) {
  if (scratch_count_ == Binder::kMaxOutputs) return Status::Internal(std::string(op_) + ": too many workspaces");
  // The binder has bounded the bytes by int64 (Binder::workspace).
  const int64_t size = static_cast<int64_t>(bytes);
  return allocate("workspace", count == 1 ? names[0] : "workspaces", DType::kU8, &size, 1,
                  &scratch_[scratch_count_++], data);
}

PyObject* EagerSource::results() {
  PyObject* objects[Binder::kMaxOutputs];
  for (size_t i = 0; i < fresh_count_; ++i) {
    void* object = nullptr;
    DLManagedTensorVersioned* managed = fresh_[i];
    fresh_[i] = nullptr;  // torch owns it now, whether or not the conversion succeeds
    if (g_api->managed_tensor_to_py_object_no_sync(managed, &object) != 0) {
      for (size_t k = 0; k < i; ++k) Py_DECREF(objects[k]);
      return nullptr;  // with torch's Python error
    }
    objects[i] = static_cast<PyObject*>(object);
  }
  if (fresh_count_ == 0) Py_RETURN_NONE;
  if (fresh_count_ == 1) return objects[0];
  PyObject* tuple = PyTuple_New(static_cast<Py_ssize_t>(fresh_count_));
  for (size_t i = 0; i < fresh_count_; ++i) {
    if (tuple == nullptr) Py_DECREF(objects[i]);
    else PyTuple_SET_ITEM(tuple, static_cast<Py_ssize_t>(i), objects[i]);
  }
  return tuple;
}

void* call(const EagerOp& op, void* inputs, void* attrs, uint64_t requested, bool grad_enabled) {
  if (op.run == nullptr) Py_RETURN_NOTIMPLEMENTED;  // a module of rules alone (a test's)
  EagerSource source(op.name, static_cast<PyObject*>(inputs), static_cast<PyObject*>(attrs), requested,
                     grad_enabled);
  bool refused = true;
  const Status s = PyTuple_GET_SIZE(static_cast<PyObject*>(inputs)) == static_cast<Py_ssize_t>(op.inputs)
                       ? op.run(source, &refused)
                       : Status::Ok();
  if (refused) Py_RETURN_NOTIMPLEMENTED;
  if (!s.ok()) {
    PyErr_SetString(PyExc_RuntimeError, s.message().c_str());
    return nullptr;
  }
  return source.results();
}

#else  // a build without torch >= 2.10's headers: no route; every call takes the kernel's

std::string use_api(const void*, void* const*, size_t, void* const*, size_t) {
  return "this build of the package has no eager route: it was built where torch's headers lack DLPack's exchange "
         "API (torch < 2.10, or no torch)";
}

void* call(const EagerOp&, void*, void*, uint64_t, bool) { Py_RETURN_NOTIMPLEMENTED; }

#endif

}  // namespace opgen::torch_eager
