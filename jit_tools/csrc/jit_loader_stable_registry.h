// Force-included into every translation unit of a stable-ABI op built by jit_loader.
//
// The stable twin of jit_loader_registry.h: it replaces the STABLE_TORCH_LIBRARY
// macros by versions that only *record* the block at load time, and defines the same
// three C functions, which create the StableLibrary objects when the loader asks and
// destroy them (which withdraws every definition and kernel) before a newer build of
// the same op registers. It includes only torch/csrc/stable and torch/headeronly,
// never ATen. Its bytes are part of every stable op's cache key.
#pragma once
#include <torch/csrc/stable/library.h>
#include <dlfcn.h>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace jit_loader_stable_detail {
using Library = torch::stable::detail::StableLibrary;
struct Registration {
  Library::Kind kind;
  const char* ns;
  const char* key;  // dispatch key of an IMPL block, else nullptr
  void (*init)(Library&);
  const char* file;
  uint32_t line;
};
// Hidden visibility: one list per shared library, never merged across builds.
__attribute__((visibility("hidden"))) inline std::vector<Registration>& registrations() {
  static std::vector<Registration> list;
  return list;
}
__attribute__((visibility("hidden"))) inline std::vector<std::unique_ptr<Library>>& live() {
  static std::vector<std::unique_ptr<Library>> libs;
  return libs;
}
struct Deferred {
  explicit Deferred(Registration r) { registrations().push_back(r); }
};
__attribute__((visibility("hidden"))) inline void unregister_all() {
  auto& libs = live();
  while (!libs.empty()) libs.pop_back();
}

// torch's message for the shim call that failed last. Older torch releases (before
// 2.13) keep none, hence the lookup by name instead of a direct call.
__attribute__((visibility("hidden"))) inline std::string last_shim_error() {
  using Getter = const char* (*)();
  auto get = reinterpret_cast<Getter>(dlsym(RTLD_DEFAULT, "torch_exception_get_what_without_backtrace"));
  const char* what = get != nullptr ? get() : nullptr;
  return what != nullptr ? what : "torch gave no reason";
}

// StableLibrary's constructor ignores the status of the shim call that opens the
// library (a namespace declared twice, an unknown dispatch key) and would go on with
// an invalid handle. So each block is opened once here first, with the status checked,
// and closed again before StableLibrary opens it for good.
__attribute__((visibility("hidden"))) inline void probe(const Registration& r) {
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
}  // namespace jit_loader_stable_detail

// The entry points: inline, so every unit may define them and the link keeps one (no
// separate unit to compile), `used`, so that each unit emits them although none of its
// code calls them.
#define JIT_LOADER_ENTRY extern "C" inline __attribute__((used, visibility("default")))

// Withdraw every registration of this library, newest first.
JIT_LOADER_ENTRY void jit_loader_unregister() { jit_loader_stable_detail::unregister_all(); }

// Perform the recorded registrations; on failure withdraw them and copy the message.
JIT_LOADER_ENTRY int jit_loader_register(char* error, size_t size) {
  using jit_loader_stable_detail::Library;
  try {
    for (const auto& r : jit_loader_stable_detail::registrations()) {
      jit_loader_stable_detail::probe(r);
      jit_loader_stable_detail::live().push_back(
          std::make_unique<Library>(r.kind, r.ns, r.key, r.file, r.line));
      r.init(*jit_loader_stable_detail::live().back());
    }
    return 0;
  } catch (const std::exception& e) {
    jit_loader_stable_detail::unregister_all();
    std::strncpy(error, e.what(), size - 1);
    error[size - 1] = '\0';
    return 1;
  }
}

// Space-separated namespaces this library registers into.
JIT_LOADER_ENTRY const char* jit_loader_namespaces() {
  static std::string names;
  names.clear();
  for (const auto& r : jit_loader_stable_detail::registrations()) {
    std::string ns = std::string(r.ns) + " ";
    if (names.find(" " + ns) == std::string::npos && names.rfind(ns, 0) != 0) names += ns;
  }
  return names.c_str();
}
#undef JIT_LOADER_ENTRY

#undef STABLE_TORCH_LIBRARY
#undef STABLE_TORCH_LIBRARY_FRAGMENT
#undef _STABLE_TORCH_LIBRARY_FRAGMENT
#undef STABLE_TORCH_LIBRARY_IMPL
#undef _STABLE_TORCH_LIBRARY_IMPL

#define STABLE_TORCH_LIBRARY(ns, m)                                                 \
  static void STABLE_TORCH_LIBRARY_init_##ns(torch::stable::detail::StableLibrary&); \
  static const ::jit_loader_stable_detail::Deferred                                 \
      STABLE_TORCH_LIBRARY_static_init_##ns(                                        \
          {torch::stable::detail::StableLibrary::Kind::DEF, C10_STRINGIZE(ns),      \
           nullptr, &STABLE_TORCH_LIBRARY_init_##ns, __FILE__, __LINE__});          \
  void STABLE_TORCH_LIBRARY_init_##ns(torch::stable::detail::StableLibrary& m)

#define STABLE_TORCH_LIBRARY_FRAGMENT(ns, m) _STABLE_TORCH_LIBRARY_FRAGMENT(ns, m, C10_UID)
#define _STABLE_TORCH_LIBRARY_FRAGMENT(ns, m, uid)                                  \
  static void C10_CONCATENATE(STABLE_TORCH_LIBRARY_FRAGMENT_init_##ns##_, uid)(     \
      torch::stable::detail::StableLibrary&);                                       \
  static const ::jit_loader_stable_detail::Deferred C10_CONCATENATE(               \
      STABLE_TORCH_LIBRARY_FRAGMENT_static_init_##ns##_, uid)(                     \
      {torch::stable::detail::StableLibrary::Kind::FRAGMENT, C10_STRINGIZE(ns),     \
       nullptr, &C10_CONCATENATE(STABLE_TORCH_LIBRARY_FRAGMENT_init_##ns##_, uid),  \
       __FILE__, __LINE__});                                                        \
  void C10_CONCATENATE(STABLE_TORCH_LIBRARY_FRAGMENT_init_##ns##_, uid)(            \
      torch::stable::detail::StableLibrary & m)

#define STABLE_TORCH_LIBRARY_IMPL(ns, k, m) _STABLE_TORCH_LIBRARY_IMPL(ns, k, m, C10_UID)
#define _STABLE_TORCH_LIBRARY_IMPL(ns, k, m, uid)                                   \
  static void C10_CONCATENATE(STABLE_TORCH_LIBRARY_IMPL_init_##ns##_##k##_, uid)(   \
      torch::stable::detail::StableLibrary&);                                       \
  static const ::jit_loader_stable_detail::Deferred C10_CONCATENATE(               \
      STABLE_TORCH_LIBRARY_IMPL_static_init_##ns##_##k##_, uid)(                   \
      {torch::stable::detail::StableLibrary::Kind::IMPL, C10_STRINGIZE(ns),         \
       C10_STRINGIZE(k),                                                            \
       &C10_CONCATENATE(STABLE_TORCH_LIBRARY_IMPL_init_##ns##_##k##_, uid),         \
       __FILE__, __LINE__});                                                        \
  void C10_CONCATENATE(STABLE_TORCH_LIBRARY_IMPL_init_##ns##_##k##_, uid)(          \
      torch::stable::detail::StableLibrary & m)
