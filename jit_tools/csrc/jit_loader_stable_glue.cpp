// Entry points the loader calls through ctypes (jit_tools/registry.py), linked into
// every stable-ABI op built by jit_loader: the same three C functions as
// jit_loader_glue.cpp, over StableLibrary objects instead of torch::Library ones, and
// no ATen header. Its bytes are part of every stable op's cache key.
#include "jit_loader_stable_registry.h"

#include <dlfcn.h>

#include <cstring>
#include <exception>
#include <string>

namespace {
using jit_loader_stable_detail::Library;

// torch's message for the shim call that failed last. Older torch releases (before
// 2.13) keep none, hence the lookup by name instead of a direct call.
std::string last_shim_error() {
  using Getter = const char* (*)();
  auto get = reinterpret_cast<Getter>(dlsym(RTLD_DEFAULT, "torch_exception_get_what_without_backtrace"));
  const char* what = get != nullptr ? get() : nullptr;
  return what != nullptr ? what : "torch gave no reason";
}

// StableLibrary's constructor ignores the status of the shim call that opens the
// library (a namespace declared twice, an unknown dispatch key) and would go on with
// an invalid handle. So each block is opened once here first, with the status checked,
// and closed again before StableLibrary opens it for good.
void probe(const jit_loader_stable_detail::Registration& r) {
  TorchLibraryHandle handle = nullptr;
  AOTITorchError status;
  if (r.kind == Library::Kind::IMPL) {
    status = aoti_torch_library_init_impl(r.ns, r.key, r.file, r.line, &handle);
  } else if (r.kind == Library::Kind::DEF) {
    status = aoti_torch_library_init_def(r.ns, r.file, r.line, &handle);
  } else {
    status = aoti_torch_library_init_fragment(r.ns, r.file, r.line, &handle);
  }
  if (status != AOTI_TORCH_SUCCESS) {
    throw std::runtime_error(last_shim_error() + " (" + r.file + ":" + std::to_string(r.line) + ")");
  }
  aoti_torch_delete_library_object(handle);
}
}  // namespace

extern "C" {

// Withdraw every registration of this library, newest first.
__attribute__((visibility("default"))) void jit_loader_unregister() {
  auto& libs = jit_loader_stable_detail::live();
  while (!libs.empty()) libs.pop_back();
}

// Perform the recorded registrations; on failure withdraw them and copy the message.
__attribute__((visibility("default"))) int jit_loader_register(char* error, size_t size) {
  try {
    for (const auto& r : jit_loader_stable_detail::registrations()) {
      probe(r);
      jit_loader_stable_detail::live().push_back(
          std::make_unique<Library>(r.kind, r.ns, r.key, r.file, r.line));
      r.init(*jit_loader_stable_detail::live().back());
    }
    return 0;
  } catch (const std::exception& e) {
    jit_loader_unregister();
    std::strncpy(error, e.what(), size - 1);
    error[size - 1] = '\0';
    return 1;
  }
}

// Space-separated namespaces this library registers into.
__attribute__((visibility("default"))) const char* jit_loader_namespaces() {
  static std::string names;
  names.clear();
  for (const auto& r : jit_loader_stable_detail::registrations()) {
    std::string ns = std::string(r.ns) + " ";
    if (names.find(" " + ns) == std::string::npos && names.rfind(ns, 0) != 0) names += ns;
  }
  return names.c_str();
}

}  // extern "C"
