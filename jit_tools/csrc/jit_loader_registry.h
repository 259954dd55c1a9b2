// Force-included into every translation unit of an op built by jit_loader.
//
// It replaces the TORCH_LIBRARY macros by versions that only *record* the
// registration at load time; jit_loader_glue.cpp performs it when the loader asks
// and withdraws it before a newer build of the same op registers. That is what lets
// a changed op be loaded again in the same process. Its bytes are part of every
// op's cache key.
#pragma once
#include <torch/library.h>
#include <memory>
#include <optional>
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
}  // namespace jit_loader_detail

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
