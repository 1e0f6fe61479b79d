// A library that a body loads when it first needs it, rather than one the
// package links: a module linked against libcublasLt cannot be imported
// where libcublasLt is missing, even to run the op on the CPU. A body that
// opens it from its state's make_cuda_state (spec `state:`) and calls through
// the symbols it looks up there leaves the package importable, and every
// other platform working, on such a machine; only the first CUDA call fails,
// with a message naming the library and where it was looked for.
//
//   opgen::SharedLibrary lt;
//   if (Status s = opgen::SharedLibrary::open("cuBLASLt", {"libcublasLt.so.13",
//                                             "$ORIGIN/../nvidia/cublas/lib/libcublasLt.so.13"}, &lt); !s.ok()) ...
//   decltype(&cublasLtCreate) create = nullptr;
//   if (Status s = lt.symbol("cublasLtCreate", create); !s.ok()) ...
//
// Never closed: the states that hold its functions are never destroyed.
#pragma once

#include <dlfcn.h>

#include <initializer_list>
#include <string>

#include "opgen/status.h"

namespace opgen {

namespace shared_library_detail {
// An address inside the module that includes this header (internal
// linkage: each module its own), to find that module's folder.
static void anchor() {}
}  // namespace shared_library_detail

class SharedLibrary {
 public:
  // Loads the first of `candidates` that loads: a plain name as dlopen finds
  // it (a library the process has loaded already, as torch and jaxlib load
  // the CUDA libraries of their wheels; LD_LIBRARY_PATH; the loader's
  // cache); "$ORIGIN/..." relative to the folder of the module that calls
  // (an installed package beside the nvidia-* wheels in site-packages).
  static Status open(const char* what, std::initializer_list<const char*> candidates, SharedLibrary* out) {
    std::string tried;
    for (const char* candidate : candidates) {
      const std::string path = expand_origin(candidate);
      if (void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) {
        out->handle_ = handle;
        out->what_ = what;
        return Status::Ok();
      }
      const char* error = dlerror();
      tried += "\n  " + path + ": " + (error ? error : "not loaded");
    }
    return Status::Internal(std::string(what) + " could not be loaded; tried:" + tried);
  }

  // The function `name` of the library, as `f`'s type (decltype(&fn) of its header's declaration).
  template <typename F>
  Status symbol(const char* name, F& f) const {
    f = reinterpret_cast<F>(dlsym(handle_, name));
    if (f == nullptr) return Status::Internal(what_ + " has no symbol " + name + " (an older version?)");
    return Status::Ok();
  }

 private:
  static std::string expand_origin(const char* candidate) {
    const std::string c = candidate;
    const std::string origin = "$ORIGIN/";
    if (c.compare(0, origin.size(), origin) != 0) return c;
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&shared_library_detail::anchor), &info) == 0 || info.dli_fname == nullptr) {
      return c;
    }
    const std::string module = info.dli_fname;
    const size_t slash = module.rfind('/');
    return (slash == std::string::npos ? std::string(".") : module.substr(0, slash)) + "/" + c.substr(origin.size());
  }

  void* handle_ = nullptr;
  std::string what_;
};

}  // namespace opgen
