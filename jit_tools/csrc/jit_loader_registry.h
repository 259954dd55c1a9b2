// Force-included into every translation unit of an op built by jit_loader.
//
// It replaces the TORCH_LIBRARY macros by versions that only *record* the
// registration at load time, and defines the three C functions the loader calls
// through ctypes (jit_tools/registry.py) to perform it and to withdraw it before a
// newer build of the same op registers. That is what lets a changed op be loaded
// again in the same process. Its bytes are part of every op's cache key.
#pragma once
#include <torch/library.h>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace jit_loader_detail {
struct Registration {
  torch::Library::Kind kind;
  const char* ns;
  std::optional<c10::DispatchKey> key;
  void (*init)(torch::Library&);
  const char* file;
  uint32_t line;
};
// Hidden visibility: one list per shared library, never merged across builds.
__attribute__((visibility("hidden"))) inline std::vector<Registration>& registrations() {
  static std::vector<Registration> list;
  return list;
}
__attribute__((visibility("hidden"))) inline std::vector<std::unique_ptr<torch::Library>>& live() {
  static std::vector<std::unique_ptr<torch::Library>> libs;
  return libs;
}
struct Deferred {
  explicit Deferred(Registration r) { registrations().push_back(r); }
};
__attribute__((visibility("hidden"))) inline void unregister_all() {
  auto& libs = live();
  while (!libs.empty()) libs.pop_back();
}
}  // namespace jit_loader_detail

// The entry points: inline, so every unit may define them and the link keeps one (no
// separate unit to compile), `used`, so that each unit emits them although none of its
// code calls them.
#define JIT_LOADER_ENTRY extern "C" inline __attribute__((used, visibility("default")))

// Withdraw every registration of this library, newest first.
JIT_LOADER_ENTRY void jit_loader_unregister() { jit_loader_detail::unregister_all(); }

// Perform the recorded registrations; on failure withdraw them and copy the message.
JIT_LOADER_ENTRY int jit_loader_register(char* error, size_t size) {
  try {
    for (const auto& r : jit_loader_detail::registrations()) {
      jit_loader_detail::live().push_back(
          std::make_unique<torch::Library>(r.kind, r.ns, r.key, r.file, r.line));
      r.init(*jit_loader_detail::live().back());
    }
    return 0;
  } catch (const std::exception& e) {
    jit_loader_detail::unregister_all();
    std::strncpy(error, e.what(), size - 1);
    error[size - 1] = '\0';
    return 1;
  }
}

// Space-separated namespaces this library registers into.
JIT_LOADER_ENTRY const char* jit_loader_namespaces() {
  static std::string names;
  names.clear();
  for (const auto& r : jit_loader_detail::registrations()) {
    std::string ns = std::string(r.ns) + " ";
    if (names.find(" " + ns) == std::string::npos && names.rfind(ns, 0) != 0) names += ns;
  }
  return names.c_str();
}
#undef JIT_LOADER_ENTRY

#undef TORCH_LIBRARY
#undef TORCH_LIBRARY_FRAGMENT
#undef _TORCH_LIBRARY_FRAGMENT
#undef TORCH_LIBRARY_IMPL
#undef _TORCH_LIBRARY_IMPL

#define TORCH_LIBRARY(ns, m)                                                        \
  static void TORCH_LIBRARY_init_##ns(torch::Library&);                             \
  static const ::jit_loader_detail::Deferred TORCH_LIBRARY_static_init_##ns(        \
      {torch::Library::DEF, C10_STRINGIZE(ns), std::nullopt,                        \
       &TORCH_LIBRARY_init_##ns, __FILE__, __LINE__});                               \
  void TORCH_LIBRARY_init_##ns(torch::Library& m)

#define TORCH_LIBRARY_FRAGMENT(ns, m) _TORCH_LIBRARY_FRAGMENT(ns, m, C10_UID)
#define _TORCH_LIBRARY_FRAGMENT(ns, m, uid)                                         \
  static void C10_CONCATENATE(TORCH_LIBRARY_FRAGMENT_init_##ns##_, uid)(            \
      torch::Library&);                                                              \
  static const ::jit_loader_detail::Deferred C10_CONCATENATE(                       \
      TORCH_LIBRARY_FRAGMENT_static_init_##ns##_, uid)(                             \
      {torch::Library::FRAGMENT, C10_STRINGIZE(ns), std::nullopt,                   \
       &C10_CONCATENATE(TORCH_LIBRARY_FRAGMENT_init_##ns##_, uid), __FILE__,        \
       __LINE__});                                                                   \
  void C10_CONCATENATE(TORCH_LIBRARY_FRAGMENT_init_##ns##_, uid)(torch::Library & m)

#define TORCH_LIBRARY_IMPL(ns, k, m) _TORCH_LIBRARY_IMPL(ns, k, m, C10_UID)
#define _TORCH_LIBRARY_IMPL(ns, k, m, uid)                                          \
  static void C10_CONCATENATE(TORCH_LIBRARY_IMPL_init_##ns##_##k##_, uid)(          \
      torch::Library&);                                                              \
  static const ::jit_loader_detail::Deferred C10_CONCATENATE(                       \
      TORCH_LIBRARY_IMPL_static_init_##ns##_##k##_, uid)(                           \
      {torch::Library::IMPL, C10_STRINGIZE(ns),                                      \
       std::make_optional(c10::DispatchKey::k),                                      \
       &C10_CONCATENATE(TORCH_LIBRARY_IMPL_init_##ns##_##k##_, uid), __FILE__,      \
       __LINE__});                                                                   \
  void C10_CONCATENATE(TORCH_LIBRARY_IMPL_init_##ns##_##k##_, uid)(torch::Library & m)
