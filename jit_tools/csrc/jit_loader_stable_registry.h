// Force-included into every translation unit of a stable-ABI op built by jit_loader.
//
// The stable twin of jit_loader_registry.h: it replaces the STABLE_TORCH_LIBRARY
// macros by versions that only *record* the block at load time, and
// jit_loader_stable_glue.cpp creates the StableLibrary objects when the loader asks
// and destroys them (which withdraws every definition and kernel) before a newer build
// of the same op registers. It includes only torch/csrc/stable and torch/headeronly,
// never ATen. Its bytes are part of every stable op's cache key.
#pragma once
#include <torch/csrc/stable/library.h>
#include <cstdint>
#include <memory>
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
}  // namespace jit_loader_stable_detail

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
