// Force-included into every translation unit of a stable-ABI op built by jit_loader.
//
// The stable twin of jit_loader_registry.h: it replaces the STABLE_TORCH_LIBRARY
// macros by versions that only *record* the block at load time, and defines the same
// four C functions (jit_loader_registry_core.h), which create the StableLibrary objects
// when the loader asks and destroy them (which withdraws every definition and kernel)
// before a newer build of the same op registers. It includes only torch/csrc/stable and
// torch/headeronly, never ATen. Its bytes and the core's are part of every stable op's
// cache key.
#pragma once
#include <torch/csrc/stable/library.h>
#include <dlfcn.h>

namespace jit_loader_detail {
using Library = torch::stable::detail::StableLibrary;
using Key = const char*;  // dispatch key of an IMPL block, else nullptr

// torch's message for the shim call that failed last. Older torch releases (before
// 2.13) keep none, hence the lookup by name instead of a direct call.
__attribute__((visibility("hidden"))) inline const char* last_shim_error() {
  using Getter = const char* (*)();
  auto get = reinterpret_cast<Getter>(dlsym(RTLD_DEFAULT, "torch_exception_get_what_without_backtrace"));
  const char* what = get != nullptr ? get() : nullptr;
  return what != nullptr ? what : "torch gave no reason";
}
}  // namespace jit_loader_detail

#include "jit_loader_registry_core.h"

// StableLibrary's constructor ignores the status of the shim call that opens the
// library (a namespace declared twice, an unknown dispatch key) and would go on with
// an invalid handle. So each block is opened once here first, with the status checked,
// and closed again before StableLibrary opens it for good.
inline bool jit_loader_detail::key_is(const Key& key, const char* name) {
  return key != nullptr && std::strcmp(key, name) == 0;
}

inline bool jit_loader_detail::opens(const Registration& r, char* error, size_t size) {
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
    std::snprintf(error, size, "%s (%s:%u)", last_shim_error(), r.file, static_cast<unsigned>(r.line));
    return false;
  }
  aoti_torch_delete_library_object(handle);
  return true;
}

#undef STABLE_TORCH_LIBRARY
#undef STABLE_TORCH_LIBRARY_FRAGMENT
#undef _STABLE_TORCH_LIBRARY_FRAGMENT
#undef STABLE_TORCH_LIBRARY_IMPL
#undef _STABLE_TORCH_LIBRARY_IMPL

#define STABLE_TORCH_LIBRARY(ns, m)                                                 \
  static void STABLE_TORCH_LIBRARY_init_##ns(torch::stable::detail::StableLibrary&); \
  static ::jit_loader_detail::Deferred STABLE_TORCH_LIBRARY_static_init_##ns(       \
      torch::stable::detail::StableLibrary::Kind::DEF, C10_STRINGIZE(ns), nullptr,   \
      &STABLE_TORCH_LIBRARY_init_##ns, __FILE__, __LINE__);                          \
  void STABLE_TORCH_LIBRARY_init_##ns(torch::stable::detail::StableLibrary& m)

#define STABLE_TORCH_LIBRARY_FRAGMENT(ns, m) _STABLE_TORCH_LIBRARY_FRAGMENT(ns, m, C10_UID)
#define _STABLE_TORCH_LIBRARY_FRAGMENT(ns, m, uid)                                  \
  static void C10_CONCATENATE(STABLE_TORCH_LIBRARY_FRAGMENT_init_##ns##_, uid)(     \
      torch::stable::detail::StableLibrary&);                                       \
  static ::jit_loader_detail::Deferred C10_CONCATENATE(                             \
      STABLE_TORCH_LIBRARY_FRAGMENT_static_init_##ns##_, uid)(                     \
      torch::stable::detail::StableLibrary::Kind::FRAGMENT, C10_STRINGIZE(ns),      \
      nullptr, &C10_CONCATENATE(STABLE_TORCH_LIBRARY_FRAGMENT_init_##ns##_, uid),   \
      __FILE__, __LINE__);                                                          \
  void C10_CONCATENATE(STABLE_TORCH_LIBRARY_FRAGMENT_init_##ns##_, uid)(            \
      torch::stable::detail::StableLibrary & m)

#define STABLE_TORCH_LIBRARY_IMPL(ns, k, m) _STABLE_TORCH_LIBRARY_IMPL(ns, k, m, C10_UID)
#define _STABLE_TORCH_LIBRARY_IMPL(ns, k, m, uid)                                   \
  static void C10_CONCATENATE(STABLE_TORCH_LIBRARY_IMPL_init_##ns##_##k##_, uid)(   \
      torch::stable::detail::StableLibrary&);                                       \
  static ::jit_loader_detail::Deferred C10_CONCATENATE(                             \
      STABLE_TORCH_LIBRARY_IMPL_static_init_##ns##_##k##_, uid)(                   \
      torch::stable::detail::StableLibrary::Kind::IMPL, C10_STRINGIZE(ns),          \
      C10_STRINGIZE(k),                                                             \
      &C10_CONCATENATE(STABLE_TORCH_LIBRARY_IMPL_init_##ns##_##k##_, uid),          \
      __FILE__, __LINE__);                                                          \
  void C10_CONCATENATE(STABLE_TORCH_LIBRARY_IMPL_init_##ns##_##k##_, uid)(          \
      torch::stable::detail::StableLibrary & m)
