// Force-included into every translation unit of an op built by jit_loader.
//
// It replaces the TORCH_LIBRARY macros by versions that only *record* the
// registration at load time; jit_loader_registry_core.h defines the four C functions
// the loader calls through ctypes (jit_tools/registry.py) to perform it and to withdraw
// it before a newer build of the same op registers. That is what lets a changed op be
// loaded again in the same process. Its bytes and the core's are part of every op's
// cache key.
#pragma once
#include <torch/library.h>
#include <optional>

namespace jit_loader_detail {
using Library = torch::Library;
using Key = std::optional<c10::DispatchKey>;
}  // namespace jit_loader_detail

#include "jit_loader_registry_core.h"

// Any block may be opened: torch::Library checks and throws.
inline bool jit_loader_detail::opens(const Registration&, char*, size_t) { return true; }
inline bool jit_loader_detail::key_is(const Key& key, const char* name) {
  return key.has_value() && std::strcmp(c10::toString(*key), name) == 0;
}

#undef TORCH_LIBRARY
#undef TORCH_LIBRARY_FRAGMENT
#undef _TORCH_LIBRARY_FRAGMENT
#undef TORCH_LIBRARY_IMPL
#undef _TORCH_LIBRARY_IMPL

#define TORCH_LIBRARY(ns, m)                                                        \
  static void TORCH_LIBRARY_init_##ns(torch::Library&);                             \
  static ::jit_loader_detail::Deferred TORCH_LIBRARY_static_init_##ns(              \
      torch::Library::DEF, C10_STRINGIZE(ns), std::nullopt,                          \
      &TORCH_LIBRARY_init_##ns, __FILE__, __LINE__);                                 \
  void TORCH_LIBRARY_init_##ns(torch::Library& m)

#define TORCH_LIBRARY_FRAGMENT(ns, m) _TORCH_LIBRARY_FRAGMENT(ns, m, C10_UID)
#define _TORCH_LIBRARY_FRAGMENT(ns, m, uid)                                         \
  static void C10_CONCATENATE(TORCH_LIBRARY_FRAGMENT_init_##ns##_, uid)(            \
      torch::Library&);                                                              \
  static ::jit_loader_detail::Deferred C10_CONCATENATE(                             \
      TORCH_LIBRARY_FRAGMENT_static_init_##ns##_, uid)(                             \
      torch::Library::FRAGMENT, C10_STRINGIZE(ns), std::nullopt,                     \
      &C10_CONCATENATE(TORCH_LIBRARY_FRAGMENT_init_##ns##_, uid), __FILE__,         \
      __LINE__);                                                                     \
  void C10_CONCATENATE(TORCH_LIBRARY_FRAGMENT_init_##ns##_, uid)(torch::Library & m)

#define TORCH_LIBRARY_IMPL(ns, k, m) _TORCH_LIBRARY_IMPL(ns, k, m, C10_UID)
#define _TORCH_LIBRARY_IMPL(ns, k, m, uid)                                          \
  static void C10_CONCATENATE(TORCH_LIBRARY_IMPL_init_##ns##_##k##_, uid)(          \
      torch::Library&);                                                              \
  static ::jit_loader_detail::Deferred C10_CONCATENATE(                             \
      TORCH_LIBRARY_IMPL_static_init_##ns##_##k##_, uid)(                           \
      torch::Library::IMPL, C10_STRINGIZE(ns),                                       \
      std::make_optional(c10::DispatchKey::k),                                       \
      &C10_CONCATENATE(TORCH_LIBRARY_IMPL_init_##ns##_##k##_, uid), __FILE__,       \
      __LINE__);                                                                     \
  void C10_CONCATENATE(TORCH_LIBRARY_IMPL_init_##ns##_##k##_, uid)(torch::Library & m)
