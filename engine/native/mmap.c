/*
 * ternforge's one native helper: read-only views of file ranges through mmap(2), so that the hashing
 * threads feed sha256 straight from the page cache instead of copying every byte with read(2) first.
 * On this project's 2-core machines that copy costs a quarter of a core (see engine/hash.ts).
 *
 *   map(fd, offset, length) -> ArrayBuffer   offset: a multiple of the page size; length > 0
 *   unmap(arrayBuffer)                       detaches the buffer; its pages are unmapped at once
 *
 * Built by engine/native/build.ts (npm's postinstall) with the system C compiler and the official
 * Node-API headers; when it is missing, engine/hash.ts reads files with read(2) instead.
 */
#define NAPI_VERSION 8
#include <node_api.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

static napi_value throw_errno(napi_env env, const char *what) {
  char msg[256];
  snprintf(msg, sizeof msg, "%s: %s", what, strerror(errno));
  napi_throw_error(env, NULL, msg);
  return NULL;
}

/* The buffer's finalizer: runs when it is detached or collected. */
static void release(napi_env env, void *data, void *hint) {
  (void)env;
  munmap(data, (size_t)(uintptr_t)hint);
}

static int get_int64(napi_env env, napi_value v, int64_t *out) {
  return napi_get_value_int64(env, v, out) == napi_ok;
}

static napi_value map(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  int64_t fd, offset, length;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 3 || !get_int64(env, argv[0], &fd) ||
      !get_int64(env, argv[1], &offset) || !get_int64(env, argv[2], &length) || fd < 0 || offset < 0 || length <= 0) {
    napi_throw_type_error(env, NULL, "map(fd, offset, length): three non-negative integers, length > 0");
    return NULL;
  }
  void *p = mmap(NULL, (size_t)length, PROT_READ, MAP_SHARED, (int)fd, (off_t)offset);
  if (p == MAP_FAILED) return throw_errno(env, "mmap");
  madvise(p, (size_t)length, MADV_SEQUENTIAL);
  napi_value buffer;
  if (napi_create_external_arraybuffer(env, p, (size_t)length, release, (void *)(uintptr_t)length, &buffer) != napi_ok) {
    munmap(p, (size_t)length);
    napi_throw_error(env, NULL, "napi_create_external_arraybuffer failed");
    return NULL;
  }
  return buffer;
}

static napi_value unmap(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  bool is_ab = false;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 1 || napi_is_arraybuffer(env, argv[0], &is_ab) != napi_ok || !is_ab) {
    napi_throw_type_error(env, NULL, "unmap(arrayBuffer): an ArrayBuffer from map()");
    return NULL;
  }
  if (napi_detach_arraybuffer(env, argv[0]) != napi_ok) {
    napi_throw_error(env, NULL, "napi_detach_arraybuffer failed");
    return NULL;
  }
  return NULL;
}

NAPI_MODULE_INIT() {
  napi_value f;
  napi_create_function(env, "map", NAPI_AUTO_LENGTH, map, NULL, &f);
  napi_set_named_property(env, exports, "map", f);
  napi_create_function(env, "unmap", NAPI_AUTO_LENGTH, unmap, NULL, &f);
  napi_set_named_property(env, exports, "unmap", f);
  return exports;
}
