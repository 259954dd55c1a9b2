// Entry points the loader calls through ctypes (jit_tools/registry.py), linked into
// every op built by jit_loader. Its bytes are part of every op's cache key.
#include "jit_loader_registry.h"

#include <cstring>
#include <exception>
#include <string>

extern "C" {

// Withdraw every registration of this library, newest first.
__attribute__((visibility("default"))) void jit_loader_unregister() {
  auto& libs = jit_loader_detail::live();
  while (!libs.empty()) libs.pop_back();
}

// Perform the recorded registrations; on failure withdraw them and copy the message.
__attribute__((visibility("default"))) int jit_loader_register(char* error, size_t size) {
  try {
    for (const auto& r : jit_loader_detail::registrations()) {
      jit_loader_detail::live().push_back(
          std::make_unique<torch::Library>(r.kind, r.ns, r.key, r.file, r.line));
      r.init(*jit_loader_detail::live().back());
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
  for (const auto& r : jit_loader_detail::registrations()) {
    std::string ns = std::string(r.ns) + " ";
    if (names.find(" " + ns) == std::string::npos && names.rfind(ns, 0) != 0) names += ns;
  }
  return names.c_str();
}

}  // extern "C"
