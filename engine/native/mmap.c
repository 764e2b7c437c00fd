/*
 * ternforge's one native helper: read-only views of file ranges through mmap(2), so that the hashing
 * threads feed sha256 straight from the page cache instead of copying every byte with read(2) first.
 * On this project's 2-core machines that copy costs a quarter of a core (see engine/hash.ts).
 *
 *   map(fd, offset, length) -> ArrayBuffer   offset: a multiple of the page size; length > 0
 *   unmap(arrayBuffer) -> boolean            detaches the buffer (its pages are unmapped on the next
 *                                            turn of the event loop); true when a page of it was gone
 *
 * A page of a mapped file that another process truncated is gone: reading it raises SIGBUS, which
 * would end the process. The handler below looks the address up among the live windows; when it is
 * one of ours, it maps a page of zeros over it, marks the window, and lets the read go on. unmap()
 * then returns true and the caller discards the digest. Any other SIGBUS goes to the action that was
 * there before (by default: the process ends, as it would have without this helper).
 *
 * Built by engine/native/build.ts (npm's postinstall) with the system C compiler and the official
 * Node-API headers; when it is missing, engine/hash.ts reads files with read(2) instead.
 */
#define NAPI_VERSION 8
#include <node_api.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* The live windows, shared by every thread; the signal handler reads them, so they are lock-free atomics. */
#define SLOTS 256
static struct {
  _Atomic uintptr_t start; /* 0: free; 1: claimed by map(), not yet filled in */
  _Atomic size_t length;
  _Atomic int lost; /* a page was gone and replaced by zeros */
} windows[SLOTS];

static struct sigaction previous;
static pthread_once_t installed = PTHREAD_ONCE_INIT;

static void on_sigbus(int sig, siginfo_t *info, void *context) {
  (void)context;
  uintptr_t addr = (uintptr_t)info->si_addr;
  for (int i = 0; i < SLOTS; i++) {
    uintptr_t start = atomic_load(&windows[i].start);
    if (start != 0 && addr >= start && addr < start + atomic_load(&windows[i].length)) {
      uintptr_t page = addr & ~((uintptr_t)sysconf(_SC_PAGESIZE) - 1);
      if (mmap((void *)page, (size_t)sysconf(_SC_PAGESIZE), PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != MAP_FAILED) {
        atomic_store(&windows[i].lost, 1);
        return; /* the read is retried and finds zeros */
      }
      break;
    }
  }
  /* Not ours (or the page could not be replaced): put the earlier action back; the retried read raises it. */
  sigaction(sig, &previous, NULL);
}

static void install(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_sigbus;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGBUS, &sa, &previous);
}

static int find(uintptr_t start) {
  for (int i = 0; i < SLOTS; i++)
    if (atomic_load(&windows[i].start) == start) return i;
  return -1;
}

static napi_value throw_errno(napi_env env, const char *what) {
  char msg[256];
  snprintf(msg, sizeof msg, "%s: %s", what, strerror(errno));
  napi_throw_error(env, NULL, msg);
  return NULL;
}

/* The buffer's finalizer: runs when it was detached or collected. */
static void release(napi_env env, void *data, void *hint) {
  (void)env;
  int i = (int)(intptr_t)hint;
  size_t length = atomic_exchange(&windows[i].length, 0); /* first: covers no address, before the range can be reused */
  munmap(data, length);
  atomic_store(&windows[i].lost, 0);
  atomic_store(&windows[i].start, 0);
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
  pthread_once(&installed, install);
  void *p = mmap(NULL, (size_t)length, PROT_READ, MAP_SHARED, (int)fd, (off_t)offset);
  if (p == MAP_FAILED) return throw_errno(env, "mmap");
  madvise(p, (size_t)length, MADV_SEQUENTIAL);
  int slot = -1;
  for (int i = 0; i < SLOTS && slot < 0; i++) {
    uintptr_t free_slot = 0;
    if (atomic_compare_exchange_strong(&windows[i].start, &free_slot, (uintptr_t)1)) slot = i; /* claimed, not yet live */
  }
  if (slot < 0) {
    munmap(p, (size_t)length);
    napi_throw_error(env, NULL, "map: too many live windows (unmap() the ones hashed)");
    return NULL;
  }
  atomic_store(&windows[slot].lost, 0);
  atomic_store(&windows[slot].start, (uintptr_t)p); /* length is still 0: covers nothing yet */
  atomic_store(&windows[slot].length, (size_t)length);
  napi_value buffer;
  if (napi_create_external_arraybuffer(env, p, (size_t)length, release, (void *)(intptr_t)slot, &buffer) != napi_ok) {
    release(env, p, (void *)(intptr_t)slot);
    napi_throw_error(env, NULL, "napi_create_external_arraybuffer failed");
    return NULL;
  }
  return buffer;
}

static napi_value unmap(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  bool is_ab = false;
  void *data = NULL;
  size_t length = 0;
  int slot = -1;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 1 || napi_is_arraybuffer(env, argv[0], &is_ab) != napi_ok || !is_ab ||
      napi_get_arraybuffer_info(env, argv[0], &data, &length) != napi_ok || data == NULL || (slot = find((uintptr_t)data)) < 0) {
    napi_throw_type_error(env, NULL, "unmap(arrayBuffer): an ArrayBuffer from map(), not yet unmapped");
    return NULL;
  }
  int lost = atomic_load(&windows[slot].lost);
  if (napi_detach_arraybuffer(env, argv[0]) != napi_ok) {
    napi_throw_error(env, NULL, "napi_detach_arraybuffer failed");
    return NULL;
  }
  napi_value result;
  napi_get_boolean(env, lost != 0, &result);
  return result;
}

NAPI_MODULE_INIT() {
  napi_value f;
  napi_create_function(env, "map", NAPI_AUTO_LENGTH, map, NULL, &f);
  napi_set_named_property(env, exports, "map", f);
  napi_create_function(env, "unmap", NAPI_AUTO_LENGTH, unmap, NULL, &f);
  napi_set_named_property(env, exports, "unmap", f);
  return exports;
}
