// The part of the registry headers both ABIs share (included by jit_loader_registry.h
// and jit_loader_stable_registry.h, never on its own): the list of recorded registration
// blocks and the four C functions the loader calls through ctypes
// (jit_tools/registry.py).
//
// Every unit of an op compiles this code (the entry points are emitted in each and the
// link keeps one), so it is written to cost the compiler little: plain pointers and C
// strings, no standard containers or strings to instantiate.
//
// The including header defines, in namespace jit_loader_detail, `Library` (the library
// object type, with a nested `Kind`), `Key` (its dispatch-key argument), and after this
// header `bool opens(const Registration&, char* error, size_t size)`: whether the block
// may be opened (false with the reason in `error`), and `bool key_is(const Key&, const
// char* name)`: whether an IMPL block's key is the dispatch key named `name` ("CPU").
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>

namespace jit_loader_detail {
struct __attribute__((visibility("hidden"))) Registration {
  Library::Kind kind;
  const char* ns;
  Key key;
  void (*init)(Library&);
  const char* file;
  uint32_t line;
  Registration* next;   // the block recorded after this one
  Registration* below;  // while registered: the block registered before this one
  Library* live;        // while registered: its library object
};

// Hidden visibility: one list per shared library, never merged across builds.
__attribute__((visibility("hidden"))) inline Registration* first = nullptr;
__attribute__((visibility("hidden"))) inline Registration* last = nullptr;
__attribute__((visibility("hidden"))) inline Registration* top = nullptr;
__attribute__((visibility("hidden"))) inline char* names = nullptr;  // jit_loader_namespaces()

// A block's record, made by the registration macros during the library's static
// initialisation, in order.
struct __attribute__((visibility("hidden"))) Deferred {
  Registration r;
  Deferred(Library::Kind kind, const char* ns, Key key, void (*init)(Library&), const char* file,
           uint32_t line)
      : r{kind, ns, key, init, file, line, nullptr, nullptr, nullptr} {
    (last != nullptr ? last->next : first) = &r;
    last = &r;
  }
  Deferred(const Deferred&) = delete;
  Deferred& operator=(const Deferred&) = delete;
};

inline bool opens(const Registration& r, char* error, size_t size);
inline bool key_is(const Key& key, const char* name);

// Destroy the library objects, newest first (which withdraws their definitions and kernels).
__attribute__((visibility("hidden"))) inline void unregister_all() {
  while (top != nullptr) {
    Registration* r = top;
    top = r->below;
    delete r->live;
    r->live = nullptr;
  }
}
}  // namespace jit_loader_detail

// The entry points: inline, so every unit may define them and the link keeps one (no
// separate unit to compile), `used`, so that each unit emits them although none of its
// code calls them.
#define JIT_LOADER_ENTRY extern "C" inline __attribute__((used, visibility("default")))

// Withdraw every registration of this library, newest first.
JIT_LOADER_ENTRY void jit_loader_unregister() { jit_loader_detail::unregister_all(); }

// Perform the recorded registrations, or with impl_key only the IMPL blocks of that
// dispatch key ("CPU": a newer build's CPU kernels over a live build that keeps the rest,
// jit_tools/swap/gate.py); on failure withdraw them and copy the message.
namespace jit_loader_detail {
__attribute__((visibility("hidden"))) inline int register_blocks(const char* impl_key, char* error,
                                                                 size_t size) {
  namespace d = jit_loader_detail;
  const auto wanted = [impl_key](const Registration& r) {
    return impl_key == nullptr || (r.kind == Library::Kind::IMPL && key_is(r.key, impl_key));
  };
  for (Registration* r = first; r != nullptr; r = r->next) {
    if (wanted(*r) && r->live != nullptr) {  // twice would make the list of live blocks a loop
      std::snprintf(error, size, "%s:%u: this library's block is registered already", r->file,
                    static_cast<unsigned>(r->line));
      return 1;
    }
  }
  try {
    for (d::Registration* r = d::first; r != nullptr; r = r->next) {
      if (!wanted(*r)) continue;
      if (!d::opens(*r, error, size)) {
        d::unregister_all();
        return 1;
      }
      r->live = new d::Library(r->kind, r->ns, r->key, r->file, r->line);
      r->below = d::top;
      d::top = r;
      r->init(*r->live);
    }
    return 0;
  } catch (const std::exception& e) {
    d::unregister_all();
    std::snprintf(error, size, "%s", e.what());
    return 1;
  }
}
}  // namespace jit_loader_detail

JIT_LOADER_ENTRY int jit_loader_register(char* error, size_t size) {
  return jit_loader_detail::register_blocks(nullptr, error, size);
}

JIT_LOADER_ENTRY int jit_loader_register_impls(const char* key, char* error, size_t size) {
  return jit_loader_detail::register_blocks(key, error, size);
}

// The namespaces this library registers into, each once, each followed by a space.
JIT_LOADER_ENTRY const char* jit_loader_namespaces() {
  namespace d = jit_loader_detail;
  size_t need = 1;
  for (d::Registration* r = d::first; r != nullptr; r = r->next) need += std::strlen(r->ns) + 1;
  char* grown = static_cast<char*>(std::realloc(d::names, need));
  if (grown == nullptr) return nullptr;  // the loader reports it
  char* names = d::names = grown;
  size_t end = 0;
  names[0] = '\0';
  for (d::Registration* r = d::first; r != nullptr; r = r->next) {
    const size_t n = std::strlen(r->ns);
    bool seen = false;
    for (size_t at = 0; at < end && !seen; at += std::strcspn(names + at, " ") + 1) {
      seen = std::strcspn(names + at, " ") == n && std::strncmp(names + at, r->ns, n) == 0;
    }
    if (!seen) {
      std::memcpy(names + end, r->ns, n);
      end += n;
      names[end++] = ' ';
      names[end] = '\0';
    }
  }
  return names;
}
#undef JIT_LOADER_ENTRY
